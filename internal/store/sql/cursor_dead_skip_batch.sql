-- DeadSkipBatch under snapshot cursors: one bounded batch of the parked
-- dead messages matching the filter given up without delivery: the parked
-- row goes, and with it the message is done (its shard's cursor is past
-- it); the audit row records what was skipped and why it was asked.
-- Parameters and fencing as in cursor_dead_retry_batch.sql; $3 is unused.
WITH picked AS (
    SELECT id FROM {{rows}}
    WHERE id = ANY (ARRAY(SELECT id FROM {{parked}} WHERE status = 'dead')) AND {{where}}
    ORDER BY id
    LIMIT $1
),
moved AS (
    DELETE FROM {{parked}} AS p
    WHERE p.id = ANY (ARRAY(SELECT id FROM picked)) AND p.status IN ('dead')
    RETURNING p.id
),
audited AS (
    UPDATE {{audit}} SET count = count + (SELECT count(*) FROM moved) WHERE id = $2
)
SELECT coalesce((SELECT max(id) FROM picked), 0), (SELECT count(*) FROM picked),
       (SELECT count(*) FROM moved), $3::text IS NULL
