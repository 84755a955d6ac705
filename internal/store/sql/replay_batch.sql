-- ReplayBatch: one bounded batch of done rows matching the filter back to
-- pending for delivery again, keeping their id and fencing token (which
-- only ever grows), with header Outbox-Replay = $4 (the replay's name) so
-- receivers can tell a replay from a redelivery. $1 batch size, $2 audit
-- row, $3 notification channel; {{where}} (filter and cursor) from $5.
--
-- Fenced on status = 'done': picked and locked as done, guarded again in
-- the UPDATE. The cursor walks the primary key forward.
WITH picked AS (
    SELECT id FROM {{table}}
    WHERE status = 'done' AND {{where}}
    ORDER BY id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
moved AS (
    UPDATE {{table}}
    SET status = 'pending', attempts = 0, available_at = now(), done_at = NULL,
        last_error = NULL, lease_owner = NULL, lease_until = NULL,
        headers = CASE WHEN jsonb_typeof(headers) = 'object' THEN headers ELSE '{}'::jsonb END
                  || jsonb_build_object('Outbox-Replay', $4::text)
    WHERE id = ANY (ARRAY(SELECT id FROM picked)) AND status = 'done'
    RETURNING id
),
audited AS (
    UPDATE {{audit}} SET count = count + (SELECT count(*) FROM moved) WHERE id = $2
)
SELECT coalesce((SELECT max(id) FROM picked), 0), (SELECT count(*) FROM picked),
       (SELECT count(*) FROM moved),
       CASE WHEN EXISTS (SELECT 1 FROM moved) THEN pg_notify($3, '') IS NULL END
