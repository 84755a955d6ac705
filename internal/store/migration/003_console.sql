-- Dead rows by id: the dead-letter view, its filters and bulk actions walk
-- it newest first or from an id. Producers pay nothing for it (rows are
-- inserted pending, outside the predicate); a row enters it only when it
-- goes dead. Building it reads the table once; on a large table create it
-- beforehand with CREATE INDEX CONCURRENTLY under the same name and this
-- statement does nothing.
CREATE INDEX IF NOT EXISTS {{dead_index}} ON {{table}} (id) WHERE status = 'dead';

-- One row per operator write (dead retry and skip, replay), dry runs
-- included. count is kept current batch by batch, in the transactions that
-- move the rows, so an interrupted action still records what it did;
-- finished_at stays NULL until the action ends.
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
