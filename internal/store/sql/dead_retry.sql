-- DeadRetry: dead rows back to pending with a fresh attempt budget.
-- $1 ids, or NULL for every dead row.
WITH retried AS (
    UPDATE {{table}}
    SET status = 'pending', attempts = 0, available_at = now(),
        lease_owner = NULL, lease_until = NULL
    WHERE status = 'dead' AND ($1::bigint[] IS NULL OR id = ANY($1))
    RETURNING id
)
SELECT id, pg_notify($2, '') IS NULL FROM retried ORDER BY id
