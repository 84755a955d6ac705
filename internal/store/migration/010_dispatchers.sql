-- Migration 010: the dispatchers that relay the table, idle or busy.

-- step: dispatchers table
-- Each running dispatcher reports itself here every few seconds (its
-- owner, host, version and lease mode, how many messages it holds and how
-- many it delivered in the last minute) and deletes its row when it
-- stops, so status and the console can tell "relay down" from "nothing to
-- do". Unlogged: a beat writes no WAL, and after a crash of the server the
-- table starts empty and fills again within a beat. A row unseen for an
-- hour is deleted by the next beat of any dispatcher.
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text || '_dispatchers')) IS NOT NULL
-- apply:
CREATE UNLOGGED TABLE IF NOT EXISTS {{dispatchers}} (
    owner        text PRIMARY KEY,
    host         text NOT NULL,
    version      text NOT NULL,
    lease_mode   text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_seen    timestamptz NOT NULL DEFAULT now(),
    beat_us      bigint NOT NULL,
    in_flight    integer NOT NULL,
    delivered_1m bigint NOT NULL
);
