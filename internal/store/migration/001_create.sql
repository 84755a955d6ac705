-- Creates the outbox table exactly as producers write to it, the indexes the
-- claim needs, and the wake-up trigger. Every statement is idempotent; the
-- caller holds an advisory lock so concurrent migrations serialise.
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

-- Ready rows, in the order the claim takes them.
CREATE INDEX IF NOT EXISTS {{ready_index}} ON {{table}} (available_at, id) WHERE status = 'pending';

-- Leases, for re-claiming and reaping expired ones.
CREATE INDEX IF NOT EXISTS {{leased_index}} ON {{table}} (lease_until) WHERE status = 'processing';

-- Unfinished rows per aggregate: the ordered claim's "is there an earlier
-- unfinished message?" probe. Partial, so done rows never slow it down.
CREATE INDEX IF NOT EXISTS {{aggregate_index}} ON {{table}} (aggregate_id, id) WHERE status <> 'done';

-- Dispatchers that are idle and listening. Producers notify only while one
-- is, so a busy system pays nothing for wake-ups. Unlogged: it is soft state.
CREATE UNLOGGED TABLE IF NOT EXISTS {{waiters}} (
    owner       text PRIMARY KEY,
    wait_until  timestamptz NOT NULL
);

CREATE OR REPLACE FUNCTION {{wake_function}}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {{waiters}} WHERE wait_until > now()) THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, '');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS {{wake_trigger}} ON {{table}};
CREATE TRIGGER {{wake_trigger}} AFTER INSERT ON {{table}}
    FOR EACH STATEMENT EXECUTE FUNCTION {{wake_function}}();
