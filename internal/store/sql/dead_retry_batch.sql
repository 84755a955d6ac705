-- DeadRetryBatch: one bounded batch of dead rows matching the filter back
-- to pending with a fresh attempt budget, in one statement and one commit.
-- $1 batch size, $2 audit row, $3 notification channel; {{where}} (the
-- filter and the cursor, id > last batch's highest) from $4.
--
-- Fenced on status = 'dead' twice: the rows are picked and locked as dead
-- (SKIP LOCKED: a row another writer holds is left alone), and the UPDATE
-- repeats the guard, so a row under a lease is never written. The dead index
-- yields the rows in id order; the UPDATE probes the primary key per row.
WITH picked AS (
    SELECT id FROM {{table}}
    WHERE status = 'dead' AND {{where}}
    ORDER BY id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {{table}}
    SET status = 'pending', attempts = 0, available_at = now(),
        lease_owner = NULL, lease_until = NULL
    WHERE id = ANY (ARRAY(SELECT id FROM picked)) AND status = 'dead'
    RETURNING id
),
audited AS (
    UPDATE {{audit}} SET count = count + (SELECT count(*) FROM moved) WHERE id = $2
)
SELECT coalesce((SELECT max(id) FROM picked), 0), (SELECT count(*) FROM picked),
       (SELECT count(*) FROM moved),
       CASE WHEN EXISTS (SELECT 1 FROM moved) THEN pg_notify($3, '') IS NULL END
