-- Migration 009: the history of a message's attempts.

-- step: attempts table
-- One row per publish that did not deliver (retried, deferred or dead):
-- when, by which dispatcher, how long it took, what it came to, the
-- receiver's status code where the sink has one, and the error. A
-- delivered attempt writes nothing here, so the happy path pays nothing.
-- Each message keeps its newest entries only (Config.AttemptHistory), and
-- they go with it (retention deletes both in one statement). No sequence:
-- a runtime role needs no grant beyond the table's, and entries order by
-- time (one message is written by one lease holder at a time). No foreign
-- key: it would lock the message's row on every entry and add a probe per
-- row to every delete of the table.
-- check:
SELECT to_regclass(format('%I.%I', $1::text, $2::text || '_attempts')) IS NOT NULL
-- apply:
CREATE TABLE IF NOT EXISTS {{attempts}} (
    message_id  bigint NOT NULL,
    at          timestamptz NOT NULL,
    dispatcher  text NOT NULL,
    attempt     integer NOT NULL,
    duration_us bigint NOT NULL,
    outcome     text NOT NULL,
    status      integer,
    error       text
);
CREATE INDEX IF NOT EXISTS {{attempts_index}} ON {{attempts}} (message_id, at);
