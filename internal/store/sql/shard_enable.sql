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
DROP TRIGGER IF EXISTS {{shard_trigger}} ON {{table}};
CREATE TRIGGER {{shard_trigger}} BEFORE INSERT ON {{table}}
    FOR EACH ROW WHEN (NEW.shard IS NULL) EXECUTE FUNCTION {{shard_function}}();
-- A row from before shards were enabled that comes back to pending (a dead
-- row retried, a done row replayed) gets its shard after the update, from
-- an AFTER trigger: a BEFORE UPDATE row trigger locks every row an update
-- touches before it is written (a heap lock record in the WAL, ~56 bytes),
-- every finalize's rows included, even when its WHEN clause is false. The
-- same function and trigger as migration 007_shard_fill, which puts them on
-- tables enabled by an earlier version.
CREATE OR REPLACE FUNCTION {{shard_fill_function}}() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fill$
BEGIN
    EXECUTE format('UPDATE %I.%I SET shard = ((hashtextextended(aggregate_id, 0) & 2147483647)'
                   ' %% (SELECT count(*) FROM %I.%I))::integer WHERE id = $1 AND shard IS NULL',
                   TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_TABLE_SCHEMA, TG_TABLE_NAME || '_shards')
        USING NEW.id;
    RETURN NULL;
END
$fill$;
DROP TRIGGER IF EXISTS {{shard_fill_trigger}} ON {{table}};
CREATE TRIGGER {{shard_fill_trigger}} AFTER UPDATE ON {{table}}
    FOR EACH ROW WHEN (NEW.shard IS NULL) EXECUTE FUNCTION {{shard_fill_function}}();
UPDATE {{table}} SET shard = (hashtextextended(aggregate_id, 0) & 2147483647) % {{shard_count}}
WHERE status IN ('pending', 'processing') AND shard IS NULL;
CREATE INDEX IF NOT EXISTS {{shard_index}} ON {{table}} (shard, id) WHERE status = 'pending';
