-- Shard leases for the table: the shard table (one row per shard, holding
-- its lease and fencing token), the members table (dispatchers alive, for
-- each to take its fair share), the shard column, set at insert by a
-- trigger from aggregate_id, and the index a shard's pending rows are read
-- through. {{shard_count}} is a literal: the hash below must not change
-- while rows carry it. Run in one transaction under the migration lock.
CREATE TABLE IF NOT EXISTS {{shards}} (
    shard       integer PRIMARY KEY,
    owner       text,
    token       bigint NOT NULL DEFAULT 0,
    lease_until timestamptz,
    -- The message its owner declared it was delivering alone, and how
    -- many owners died while it was declared; the shard is delivered one
    -- message at a time up to isolate_through after an owner died. See
    -- docs/shard-leases.md, "Poison messages".
    strike_id   bigint,
    strikes     integer NOT NULL DEFAULT 0,
    isolate_through bigint
);
ALTER TABLE {{shards}} ADD COLUMN IF NOT EXISTS isolate_through bigint;
INSERT INTO {{shards}} (shard) SELECT generate_series(0, {{shard_count}} - 1) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS {{shard_members}} (
    owner     text PRIMARY KEY,
    seen      timestamptz NOT NULL,
    -- Messages it had in flight at its last renewal, for status.
    in_flight integer NOT NULL DEFAULT 0
);
ALTER TABLE {{shard_members}} ADD COLUMN IF NOT EXISTS in_flight integer NOT NULL DEFAULT 0;
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS shard integer;
CREATE OR REPLACE FUNCTION {{shard_function}}() RETURNS trigger LANGUAGE plpgsql AS {{tag}}
BEGIN
    NEW.shard := (hashtextextended(NEW.aggregate_id, 0) & 2147483647) % {{shard_count}};
    RETURN NEW;
END
{{tag}};
-- Its triggers, and the one that gives a row from before shards its shard
-- when it is updated, are migration 007_shard_fill's steps, which
-- EnableShards applies next in the same transaction.
UPDATE {{table}} SET shard = (hashtextextended(aggregate_id, 0) & 2147483647) % {{shard_count}}
WHERE status IN ('pending', 'processing') AND shard IS NULL;
CREATE INDEX IF NOT EXISTS {{shard_index}} ON {{table}} (shard, id) WHERE status = 'pending';
