-- DeadRetry under snapshot cursors: parked dead messages back to waiting,
-- due now, with a fresh attempt budget, and the dispatchers woken.
-- $1 ids, or NULL for every dead message; $2 the wake-up channel.
WITH retried AS (
    UPDATE {{parked}}
    SET status = 'pending', attempts = 0, available_at = now()
    WHERE status = 'dead' AND ($1::bigint[] IS NULL OR id = ANY($1))
    RETURNING id
)
SELECT id, pg_notify($2, '') IS NULL FROM retried ORDER BY id
