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

-- step: shard members in-flight column
-- What each shard-lease dispatcher has in flight, reported with its
-- renewal, so that status counts those messages as processing (no claim
-- is written under shard leases). A constant default adds the column
-- without a rewrite.
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text || '_shard_members')) IS NULL
    OR EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_shard_members'))
                 AND a.attname = 'in_flight' AND NOT a.attisdropped)
-- apply:
ALTER TABLE IF EXISTS {{shard_members}} ADD COLUMN IF NOT EXISTS in_flight integer NOT NULL DEFAULT 0;
