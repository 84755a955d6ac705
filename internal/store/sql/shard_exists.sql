-- Whether shard leases are enabled (the shard table exists), and whether
-- they are current (migration 005's columns are there). $1 the shard
-- table's quoted, qualified name, $2 the members table's.
SELECT to_regclass($1) IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = to_regclass($1) AND a.attname = 'isolate_through' AND NOT a.attisdropped)
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                   WHERE a.attrelid = to_regclass($2) AND a.attname = 'in_flight' AND NOT a.attisdropped)
