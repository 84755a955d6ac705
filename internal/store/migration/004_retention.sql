-- Migration 004: what the retention purge reads.

-- step: done index
-- Done rows by the time they finished: a purge batch takes the oldest from
-- the front of it and stops at the cutoff, so a pass reads about as many
-- rows as it deletes, never the done rows still too young to go nor the
-- pending and dead ones. Producers pay nothing for it (rows are inserted
-- pending, outside the predicate); a row enters it when it is finalized
-- done. On an existing table it is built CONCURRENTLY, so producers keep
-- writing while it reads the table once.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
               WHERE i.indexrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_done'))
                 AND i.indisvalid)
-- apply:
DROP INDEX {{concurrently}} IF EXISTS {{schema}}.{{done_index}};
CREATE INDEX {{concurrently}} {{done_index}} ON {{table}} (done_at, id) WHERE status = 'done';
