-- Whether shard leases are enabled (the shard table exists), and whether
-- its table is current (migration 005's column is there). $1 its quoted,
-- qualified name.
SELECT to_regclass($1) IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = to_regclass($1) AND a.attname = 'isolate_through' AND NOT a.attisdropped)
