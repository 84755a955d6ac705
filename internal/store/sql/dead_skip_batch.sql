-- DeadSkipBatch: one bounded batch of dead rows matching the filter to done
-- without delivery (last_error is kept as the record of why). Parameters and
-- fencing as in dead_retry_batch.sql; $3 is unused (nothing to wake).
WITH picked AS (
    SELECT id FROM {{table}}
    WHERE status = 'dead' AND {{where}}
    ORDER BY id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {{table}}
    SET status = 'done', done_at = now(), lease_owner = NULL, lease_until = NULL
    WHERE id = ANY (ARRAY(SELECT id FROM picked)) AND status = 'dead'
    RETURNING id
),
audited AS (
    UPDATE {{audit}} SET count = count + (SELECT count(*) FROM moved) WHERE id = $2
)
SELECT coalesce((SELECT max(id) FROM picked), 0), (SELECT count(*) FROM picked),
       (SELECT count(*) FROM moved), $3::text IS NULL
