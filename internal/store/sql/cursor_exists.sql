-- Whether the table has snapshot cursors (the parked table exists and the
-- shard table has its cursor). $1 the parked table's quoted, qualified
-- name, $2 the shard table's.
SELECT to_regclass($1) IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                   WHERE a.attrelid = to_regclass($2) AND a.attname = 'win_last' AND NOT a.attisdropped)
