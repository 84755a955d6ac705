-- DeadRetryBatch under snapshot cursors: one bounded batch of the parked
-- dead messages matching the filter back to waiting, due now, with a fresh
-- attempt budget, in one statement and one commit. Parameters as in
-- dead_retry_batch.sql; the filter reads the rows as the console does
-- (cursor_console_rows.sql), and the dead ones are looked up by id from
-- the parked table.
--
-- Fenced on the parked row being dead: the UPDATE repeats the guard, so a
-- message retried (and being delivered) meanwhile is left alone.
-- Dispatchers read only the parked rows that wait, never a dead one.
WITH picked AS (
    SELECT id FROM {{rows}}
    WHERE id = ANY (ARRAY(SELECT id FROM {{parked}} WHERE status = 'dead')) AND {{where}}
    ORDER BY id
    LIMIT $1
),
moved AS (
    UPDATE {{parked}} AS p
    SET status = 'pending', attempts = 0, available_at = now()
    WHERE p.id = ANY (ARRAY(SELECT id FROM picked)) AND p.status IN ('dead')
    RETURNING p.id
),
audited AS (
    UPDATE {{audit}} SET count = count + (SELECT count(*) FROM moved) WHERE id = $2
)
SELECT coalesce((SELECT max(id) FROM picked), 0), (SELECT count(*) FROM picked),
       (SELECT count(*) FROM moved),
       CASE WHEN EXISTS (SELECT 1 FROM moved) THEN pg_notify($3, '') IS NULL END
