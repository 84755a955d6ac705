-- Migration 007: shard leases' trigger on INSERT only.
-- Tables whose shards were enabled by an earlier version give an updated
-- row from before shards its shard from a BEFORE INSERT OR UPDATE row
-- trigger. A BEFORE UPDATE row trigger locks every row an update touches
-- before writing it, even when its WHEN clause is false: a heap lock
-- record (~56 bytes of WAL) and a tuple lock for every finalized message.
-- The shard trigger now fires on INSERT only, and an AFTER UPDATE trigger
-- (which reads the old row without locking it) gives such a row its shard.
-- Store.EnableShards applies these steps too, so tables enabled from now on
-- get the same. Tables without shards have nothing to do here.

-- step: shard fill function
-- check:
SELECT to_regprocedure(format('%I.%I()', $1::text, $2::text || '_shard')) IS NULL
    OR to_regprocedure(format('%I.%I()', $1::text, $2::text || '_shard_fill')) IS NOT NULL
-- apply:
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

-- step: shard triggers
-- tgtype 7 is BEFORE INSERT FOR EACH ROW (the earlier trigger was 23,
-- INSERT OR UPDATE); 17 is AFTER UPDATE FOR EACH ROW. Both in one
-- transaction, so no insert meets the table without its shard trigger.
-- check:
SELECT to_regprocedure(format('%I.%I()', $1::text, $2::text || '_shard')) IS NULL
    OR (EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS t
                WHERE t.tgrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                  AND t.tgname = $2::text || '_shard' AND t.tgtype = 7)
        AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS t
                    WHERE t.tgrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                      AND t.tgname = $2::text || '_shard_fill' AND t.tgtype = 17))
-- apply:
DROP TRIGGER IF EXISTS {{shard_trigger}} ON {{table}};
CREATE TRIGGER {{shard_trigger}} BEFORE INSERT ON {{table}}
    FOR EACH ROW WHEN (NEW.shard IS NULL) EXECUTE FUNCTION {{shard_function}}();
DROP TRIGGER IF EXISTS {{shard_fill_trigger}} ON {{table}};
CREATE TRIGGER {{shard_fill_trigger}} AFTER UPDATE ON {{table}}
    FOR EACH ROW WHEN (NEW.shard IS NULL) EXECUTE FUNCTION {{shard_fill_function}}();
