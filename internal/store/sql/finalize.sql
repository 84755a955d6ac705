-- Finalize a batch of outcomes in one statement. Each row is written only if
-- its fence still holds (still processing, same lease_version, same owner);
-- RETURNING names the leases (id and version) whose fence held, so the caller
-- learns per message whether its lease was lost.
-- $1 owner, $2 ids, $3 lease versions, $4 new statuses,
-- $5 delays in microseconds (pending only), $6 attempts to refund, $7 errors ('' keeps the previous one),
-- $8 each row's created_at as claimed (NULL: not fenced on it). The fence
-- includes created_at so that a write meant for a row that is gone cannot
-- land on another row given its id again (after a failover, a restore or
-- a sequence reset), whose first lease has the same token.
UPDATE {{table}} AS o
SET status = r.status,
    available_at = CASE WHEN r.status = 'pending'
                        THEN now() + r.delay_us * interval '1 microsecond'
                        ELSE o.available_at END,
    attempts = o.attempts - r.refund,
    last_error = CASE WHEN r.status = 'done' THEN NULL
                      WHEN r.last_error = '' THEN o.last_error
                      ELSE r.last_error END,
    done_at = CASE WHEN r.status = 'done' THEN now() END,
    lease_owner = NULL,
    lease_until = NULL
FROM unnest($2::bigint[], $3::bigint[], $4::text[], $5::bigint[], $6::integer[], $7::text[], $8::timestamptz[],
            array_fill('processing'::text, ARRAY[cardinality($2::bigint[])]))
     AS r(id, version, status, delay_us, refund, last_error, born, fenced)
-- The status to fence on comes with each write, not as the constant
-- 'processing': compared with the constant, the statement may be planned
-- as a walk of the partial index of processing rows filtered by id, and
-- while a snapshot older than the rows' claims is open anywhere (a long
-- transaction), no scan may mark the entries of the rows finalized since
-- as dead, so each statement would walk them all. A status the planner
-- cannot see keeps that index out, and the plan finds each row by its
-- id, one primary-key probe per write (TestPlansUsePartialIndexes).
WHERE o.id = r.id
  AND o.status = r.fenced
  AND o.lease_version = r.version
  AND o.lease_owner = $1
  AND (r.born IS NULL OR o.created_at = r.born)
RETURNING o.id, o.lease_version
