-- Migration 001: the outbox table exactly as producers write to it, the
-- indexes the claim needs, the waiters table and the wake-up trigger.
-- The format (steps, checks, markers) is described in README.md here.

-- step: schema
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)
-- apply:
CREATE SCHEMA IF NOT EXISTS {{schema}};

-- step: table
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text)) IS NOT NULL
-- apply:
CREATE TABLE IF NOT EXISTS {{table}} (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type text NOT NULL,
    aggregate_id   text NOT NULL,
    event_type     text NOT NULL,
    payload        jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    status         text NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'processing', 'done', 'dead')),
    available_at   timestamptz NOT NULL DEFAULT now(),
    attempts       integer NOT NULL DEFAULT 0,
    lease_owner    text,
    lease_until    timestamptz,
    lease_version  bigint NOT NULL DEFAULT 0,
    last_error     text,
    done_at        timestamptz
);

-- step: ready index
-- Ready rows, in the order the claim takes them. A failed concurrent build
-- leaves an invalid index of that name: the check wants a valid one, and the
-- apply drops whatever is left before it builds.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
               WHERE i.indexrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_ready'))
                 AND i.indisvalid)
-- apply:
DROP INDEX {{concurrently}} IF EXISTS {{schema}}.{{ready_index}};
CREATE INDEX {{concurrently}} {{ready_index}} ON {{table}} (available_at, id) WHERE status = 'pending';

-- step: leased index
-- Leases, for re-claiming and reaping expired ones.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
               WHERE i.indexrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_leased'))
                 AND i.indisvalid)
-- apply:
DROP INDEX {{concurrently}} IF EXISTS {{schema}}.{{leased_index}};
CREATE INDEX {{concurrently}} {{leased_index}} ON {{table}} (lease_until) WHERE status = 'processing';

-- step: aggregate index
-- Unfinished rows per aggregate: the ordered claim's "is there an earlier
-- unfinished message?" probe. Partial, so done rows never slow it down.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
               WHERE i.indexrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_aggregate_head'))
                 AND i.indisvalid)
-- apply:
DROP INDEX {{concurrently}} IF EXISTS {{schema}}.{{aggregate_index}};
CREATE INDEX {{concurrently}} {{aggregate_index}} ON {{table}} (aggregate_id, id) WHERE status <> 'done';

-- step: waiters table
-- Dispatchers that are idle and listening. Producers notify only while one
-- is, so a busy system pays nothing for wake-ups. Unlogged: it is soft state.
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text || '_waiters')) IS NOT NULL
-- apply:
CREATE UNLOGGED TABLE IF NOT EXISTS {{waiters}} (
    owner       text PRIMARY KEY,
    wait_until  timestamptz NOT NULL
);

-- step: wake function
-- Runs with the producer's session settings, so it names the waiters table
-- with its schema and pins its own search_path: a producer whose search_path
-- differs from the migrator's, or holds a same-named table earlier on it,
-- gets the same function. The comment versions the body: change the body,
-- change the version, and migrate replaces it (no table lock).
-- check:
SELECT coalesce(pg_catalog.obj_description(
           to_regprocedure(format('%I.%I()', $1::text, $2::text || '_wake')), 'pg_proc')
       = 'outboxd wake-up trigger function, version 2', false)
-- apply:
CREATE OR REPLACE FUNCTION {{wake_function}}() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {{waiters}} WHERE wait_until > now()) THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, '');
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION {{wake_function}}() IS 'outboxd wake-up trigger function, version 2';

-- step: wake trigger
-- One notification per INSERT statement (tgtype 4: AFTER INSERT FOR EACH
-- STATEMENT), calling the function above.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS t
               WHERE t.tgrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                 AND t.tgname = $2::text || '_wake'
                 AND t.tgfoid = to_regprocedure(format('%I.%I()', $1::text, $2::text || '_wake'))
                 AND t.tgtype = 4)
-- apply:
DROP TRIGGER IF EXISTS {{wake_trigger}} ON {{table}};
CREATE TRIGGER {{wake_trigger}} AFTER INSERT ON {{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{wake_function}}();
