-- Migration 006: each message's identity, the key receivers deduplicate on.
-- The id is the order and read key, but not an identity: after a failover
-- to a standby that had not received the last rows, a point-in-time
-- restore or a sequence reset, the identity sequence hands the ids of rows
-- already published to new messages, and a receiver deduplicating on the
-- id would drop them. A random UUID given at insert is never reused.

-- step: uid column
-- Added without a default, then given one: a volatile default on ADD
-- COLUMN would rewrite the table under an ACCESS EXCLUSIVE lock, while
-- this takes the lock for an instant and rewrites nothing. Rows inserted
-- before keep a NULL uid and are still sent under their numeric id, the
-- identity they were (perhaps) already delivered under. A producer may set
-- uid itself (its own event id); it must then be unique per message.
-- check:
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
               WHERE a.attrelid = to_regclass(format('%I.%I', $1::text, $2::text))
                 AND a.attname = 'uid' AND NOT a.attisdropped)
-- apply:
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS uid uuid;
ALTER TABLE {{table}} ALTER COLUMN uid SET DEFAULT gen_random_uuid();
