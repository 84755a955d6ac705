-- Claim: reap, then take up to $2 rows, in one statement and one commit.
-- $1 owner, $2 batch, $3 lease (microseconds), $4 max attempts,
-- $5 whether to clear this owner's waiter row (it just woke up),
-- $6 and $7 the position (available_at, id) in the ready queue the claim
-- starts after ('-infinity', 0: the front), $8 the expired leases to look
-- at: those that ran out since then ('-infinity': all, 'infinity': none).
--
-- The position is the dispatcher's: a little behind the rows it claimed
-- last (see internal/lease), so the claim does not walk again the index
-- entries those rows left behind. Each claim leaves the entries of its rows
-- in the ready index until they are vacuumed, and while any snapshot older
-- than the claim is open (a long transaction, a replica's query with
-- hot_standby_feedback) no scan may mark them dead: a claim from the front
-- would walk the entries of every row claimed since that snapshot was
-- taken. The dispatcher starts from the front now and then, for the rows
-- that commit behind its position. The leased index is the same: the
-- entries of every row claimed since such a snapshot was taken stay in it
-- with their lease_until, and once that is past, a look for expired leases
-- from its front walks them all. The dispatcher looks for expired leases
-- only now and then, from about where it looked last ($8).
--
-- The two sources are separate index-driven scans on purpose: one
-- "pending OR expired ORDER BY id" predicate is planned as a primary-key walk
-- that reads every done row before it finds a pending one.
WITH {{reap}}
expired AS (
    SELECT o.id FROM {{table}} AS o
    WHERE o.status = 'processing' AND o.lease_until < now() AND o.lease_until >= $8::timestamptz
      AND o.attempts < $4
    ORDER BY o.lease_until
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
ready AS (
    SELECT o.id FROM {{table}} AS o
    WHERE o.status = 'pending' AND o.available_at <= now()
      AND (o.available_at, o.id) > ($6::timestamptz, $7::bigint)
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
          o.created_at, o.attempts, o.lease_version, o.headers::text, o.uid::text, now(),
          -- the row's place in the ready queue; null for an expired lease
          CASE WHEN o.id <> ALL (ARRAY(SELECT id FROM expired)) THEN o.available_at END
