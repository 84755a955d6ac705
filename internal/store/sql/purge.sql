-- Purge: delete one bounded batch of done rows finished before now() - $1 µs,
-- walking the primary key from id $2. Returns the deleted ids' maximum and count.
-- SKIP LOCKED lets several replicas purge at once without queueing on each
-- other's batches; = ANY(ARRAY(...)) keeps the DELETE a primary-key probe.
WITH victims AS (
    SELECT id FROM {{table}}
    WHERE id > $2 AND status = 'done' AND done_at < now() - $1 * interval '1 microsecond'
    ORDER BY id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM {{table}} WHERE id = ANY (ARRAY(SELECT id FROM victims)) RETURNING id
)
SELECT coalesce(max(id), 0), count(*) FROM deleted
