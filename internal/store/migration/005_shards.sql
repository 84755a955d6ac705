-- Migration 005: shard leases' isolation after a crash.

-- step: shard isolation column
-- A table whose shards were enabled by an earlier version lacks the
-- column that bounds a shard's one-at-a-time delivery after its owner
-- died (docs/shard-leases.md, "Poison messages"). The shard table is a
-- few rows; a nullable column without a default is added in an instant.
-- Tables without shards have nothing to do here: EnableShards creates
-- the column.
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text || '_shards')) IS NULL
    OR EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_shards'))
                 AND a.attname = 'isolate_through' AND NOT a.attisdropped)
-- apply:
ALTER TABLE IF EXISTS {{shards}} ADD COLUMN IF NOT EXISTS isolate_through bigint;
