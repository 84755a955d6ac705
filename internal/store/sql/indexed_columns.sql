-- IndexedColumns: the columns an equality filter term can drive a search
-- by: those that lead a valid index of the table on (column, id) without a
-- predicate, such as the operator's own (aggregate_id, id). Such an index
-- yields the matches of "column = value" in id order, so the search reads
-- only matching rows; a term on any other column is checked row by row in
-- a bounded window instead. $1 is the table's quoted name.
SELECT DISTINCT a.attname::text
FROM pg_catalog.pg_index AS i
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
JOIN pg_catalog.pg_attribute AS k ON k.attrelid = i.indrelid AND k.attnum = i.indkey[1]
WHERE i.indrelid = $1::text::regclass
  AND i.indisvalid
  AND i.indpred IS NULL
  AND i.indnkeyatts >= 2
  AND k.attname = 'id'
  AND a.attname IN ('event_type', 'aggregate_type', 'aggregate_id')
