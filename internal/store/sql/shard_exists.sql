-- Whether shard leases are enabled (the shard table exists), whether they
-- are current (migration 005's columns are there), and whether the table
-- has snapshot cursors (the parked table exists and the shard table has
-- its cursor). $1 the shard table's quoted, qualified name, $2 the members
-- table's, $3 the parked table's.
SELECT to_regclass($1) IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = to_regclass($1) AND a.attname = 'isolate_through' AND NOT a.attisdropped)
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                   WHERE a.attrelid = to_regclass($2) AND a.attname = 'in_flight' AND NOT a.attisdropped),
       to_regclass($3) IS NOT NULL
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
                   WHERE a.attrelid = to_regclass($1) AND a.attname = 'win_last' AND NOT a.attisdropped)
