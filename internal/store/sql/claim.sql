-- Claim: reap, then take up to $2 rows, in one statement and one commit.
-- $1 owner, $2 batch, $3 lease (microseconds), $4 max attempts,
-- $5 whether to clear this owner's waiter row (it just woke up).
--
-- The two sources are separate index-driven scans on purpose: one
-- "pending OR expired ORDER BY id" predicate is planned as a primary-key walk
-- that reads every done row before it finds a pending one.
WITH {{reap}}
expired AS (
    SELECT o.id FROM {{table}} AS o
    WHERE o.status = 'processing' AND o.lease_until < now() AND o.attempts < $4
    ORDER BY o.lease_until
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
ready AS (
    SELECT o.id FROM {{table}} AS o
    WHERE o.status = 'pending' AND o.available_at <= now()
    ORDER BY o.available_at, o.id
    LIMIT greatest($2 - (SELECT count(*) FROM expired), 0)
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS o
SET status = 'processing',
    lease_owner = $1,
    lease_until = now() + $3 * interval '1 microsecond',
    lease_version = o.lease_version + 1,
    attempts = o.attempts + 1
-- = ANY(ARRAY(...)) makes this a primary-key probe per row; a join
-- against the CTEs is planned as a hash join over the whole table.
WHERE o.id = ANY (ARRAY(SELECT id FROM expired UNION ALL SELECT id FROM ready))
RETURNING o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
          o.created_at, o.attempts, o.lease_version, o.headers::text, o.uid::text, now()
