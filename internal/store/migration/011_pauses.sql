-- Migration 011: destinations an operator paused.

-- step: pauses table
-- One row per paused destination of the table (a route's name, "default"
-- for the default sink; '' for the whole table), written by `outboxd
-- pause` and the console and deleted by resume. Every dispatcher of the
-- table reads it, so a pause holds on every machine and over restarts:
-- a logged table, unlike the dispatchers'.
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text || '_pauses')) IS NOT NULL
-- apply:
CREATE TABLE IF NOT EXISTS {{pauses}} (
    route     text PRIMARY KEY,
    paused_by text NOT NULL,
    paused_at timestamptz NOT NULL DEFAULT now(),
    reason    text NOT NULL DEFAULT ''
);

-- step: dispatchers flow column
-- What each dispatcher holds of its destinations' limits (in flight,
-- waiting for budget, handed back) and whether its sink's breaker is open,
-- written with its beat, so status and the console show the backpressure
-- of every dispatcher. NULL from a dispatcher of an earlier version.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
               WHERE attrelid = to_regclass(format('%I.%I', $1::text, $2::text || '_dispatchers'))
                 AND attname = 'flow' AND NOT attisdropped)
-- apply:
ALTER TABLE {{dispatchers}} ADD COLUMN IF NOT EXISTS flow jsonb;
