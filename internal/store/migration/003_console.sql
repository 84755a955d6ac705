-- Migration 003: what the web console reads and writes besides the table's
-- own columns.

-- step: dead index
-- Dead rows by id: the dead-letter view, its filters and bulk actions walk
-- it newest first or from an id. Producers pay nothing for it (rows are
-- inserted pending, outside the predicate); a row enters it only when it
-- goes dead. On an existing table it is built CONCURRENTLY, so producers
-- keep writing while it reads the table once.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
               WHERE i.indexrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_dead'))
                 AND i.indisvalid)
-- apply:
DROP INDEX {{concurrently}} IF EXISTS {{schema}}.{{dead_index}};
CREATE INDEX {{concurrently}} {{dead_index}} ON {{table}} (id) WHERE status = 'dead';

-- step: audit table
-- One row per operator write (dead retry and skip, replay), dry runs
-- included. count is kept current batch by batch, in the transactions that
-- move the rows, so an interrupted action still records what it did;
-- finished_at stays NULL until the action ends.
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text || '_audit')) IS NOT NULL
-- apply:
CREATE TABLE IF NOT EXISTS {{audit}} (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    actor       text NOT NULL,
    action      text NOT NULL,
    name        text,
    filter      text[] NOT NULL,
    count       bigint NOT NULL DEFAULT 0,
    dry_run     boolean NOT NULL
);
