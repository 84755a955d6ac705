-- Resolve: the table's schema and name, and whether it has every column and
-- companion table the current version reads and writes (the attempt
-- history, the live dispatchers and what they report, the pauses); no row if
-- it does not exist.
SELECT n.nspname, c.relname,
       (SELECT count(*) = 2 FROM pg_catalog.pg_attribute AS a
        WHERE a.attrelid = c.oid AND a.attname IN ('headers', 'uid') AND NOT a.attisdropped)
       AND (SELECT count(*) = 3 FROM pg_catalog.pg_class AS h
            WHERE h.relnamespace = c.relnamespace
              AND h.relname IN (c.relname || '_attempts', c.relname || '_dispatchers', c.relname || '_pauses'))
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                   JOIN pg_catalog.pg_class AS d ON d.oid = a.attrelid
                   WHERE d.relnamespace = c.relnamespace AND d.relname = c.relname || '_dispatchers'
                     AND a.attname = 'flow' AND NOT a.attisdropped)
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass($1)
