-- The outbox tables whose schema and name match LIKE patterns ($1: the
-- schema's, NULL for the first schema of the search path; $2: the name's),
-- as SCHEMA.NAME (unquoted, as --table takes it), in order. An outbox table is a table (plain or
-- partitioned, not a partition) with the columns every version has; the
-- tables migrate adds beside it (waiters, audit, shards...) have not.
SELECT n.nspname || '.' || c.relname
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND ($1::text IS NULL AND n.nspname = current_schema() OR n.nspname LIKE $1) AND c.relname LIKE $2
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
  AND strpos(n.nspname, '.') = 0 -- SCHEMA.NAME could not name it
  AND (SELECT count(*) FROM pg_catalog.pg_attribute AS a
       WHERE a.attrelid = c.oid AND NOT a.attisdropped
         AND a.attname IN ('aggregate_type', 'aggregate_id', 'event_type', 'payload', 'lease_version')) = 5
ORDER BY n.nspname, c.relname
