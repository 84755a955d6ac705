-- Reap: the CTEs both claims start with. They clear the claimer's waiter
-- row when asked ($5), and send to dead the processing rows whose lease
-- expired with no attempt left (a message that crashes its worker every
-- time never reaches a finalize). SKIP LOCKED: a claim never waits.
-- {{expired_since}} is the claim's parameter that bounds the leases looked
-- at to those that ran out since then (see claim.sql).
cleared AS (
    DELETE FROM {{waiters}} WHERE $5::boolean AND owner = $1
),
reaped AS (
    UPDATE {{table}}
    SET status = 'dead',
        last_error = 'lease expired after max attempts (worker crash?)',
        lease_owner = NULL,
        lease_until = NULL
    WHERE id = ANY (ARRAY(
        SELECT id FROM {{table}}
        WHERE status = 'processing' AND lease_until < now() AND lease_until >= {{expired_since}}
          AND attempts >= $4
        ORDER BY lease_until
        LIMIT 1000
        FOR UPDATE SKIP LOCKED
    ))
),
