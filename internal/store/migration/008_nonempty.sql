-- Migration 008: every message names its aggregate and its event.
-- A row with an empty aggregate_type, aggregate_id or event_type goes out
-- with an empty CloudEvents type or subject (`Ce-Type: ` is not valid
-- CloudEvents) and an empty ordering key. The library refuses such rows at
-- enqueue; this refuses them from SQL producers too.

-- step: non-empty names
-- Added NOT VALID: the lock is taken for an instant and only new rows are
-- checked. Migrate then validates it against the existing rows
-- (Store.validateNonEmpty) when none violates it, and otherwise says how
-- many do, leaving it NOT VALID until they are fixed.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint AS c
               WHERE c.conrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                 AND c.conname = $2::text || '_nonempty')
-- apply:
ALTER TABLE {{table}} ADD CONSTRAINT {{nonempty_check}}
    CHECK (aggregate_type <> '' AND aggregate_id <> '' AND event_type <> '') NOT VALID;
