-- A dispatcher's beat: its row, inserted or brought up to date, and the
-- rows of dispatchers unseen for an hour deleted (they died without a
-- word). $1 owner, $2 host, $3 version, $4 lease mode, $5 the beat's
-- interval in microseconds, $6 messages held, $7 delivered in the last
-- minute, $8 the first beat of a run (started_at is set anew: an owner
-- name may be reused by a later run), $9 its flow report (JSON, or NULL).
WITH gone AS (
    DELETE FROM {{dispatchers}} WHERE last_seen < now() - interval '1 hour' AND owner <> $1
)
INSERT INTO {{dispatchers}} AS d (owner, host, version, lease_mode, beat_us, in_flight, delivered_1m, flow)
VALUES ($1, $2, $3, $4, $5, $6, $7, $9::jsonb)
ON CONFLICT (owner) DO UPDATE
SET host = excluded.host, version = excluded.version, lease_mode = excluded.lease_mode,
    started_at = CASE WHEN $8::boolean THEN now() ELSE d.started_at END,
    last_seen = now(), beat_us = excluded.beat_us, in_flight = excluded.in_flight,
    delivered_1m = excluded.delivered_1m, flow = excluded.flow
