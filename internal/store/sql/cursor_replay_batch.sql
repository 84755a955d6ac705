-- ReplayBatch under snapshot cursors: one bounded batch of the delivered
-- messages matching the filter parked again as waiting, due now, with a
-- fresh attempt budget, so the dispatchers deliver them again from the
-- parked table (ordered, a replayed message holds back the later ones of
-- its aggregate until it is delivered, as a row made pending does under
-- the other modes). Each carries header Outbox-Replay = $4: the one write
-- of an outbox row under snapshot cursors, which leaves its transaction id
-- (the xid column) and so its place behind the cursor as it was.
-- Parameters as in replay_batch.sql.
--
-- Fenced on being delivered: a message is picked only if its derived
-- status is done, and parked only if it is not parked already (a parked
-- message is waiting or dead, not done).
-- A message delivered before shards were enabled has no shard: it is
-- parked under its aggregate's.
WITH picked AS (
    SELECT id,
           coalesce(shard, ((hashtextextended(aggregate_id, 0) & 2147483647)
                            % (SELECT count(*) FROM {{shards}}))::integer) AS shard,
           aggregate_id
    FROM {{rows}}
    WHERE status = 'done' AND {{where}}
    ORDER BY id
    LIMIT $1
),
parked AS (
    INSERT INTO {{parked}} (id, shard, aggregate_id, status, attempts, available_at)
    SELECT id, shard, aggregate_id, 'pending', 0, now() FROM picked
    ON CONFLICT (id) DO NOTHING
    RETURNING id
),
moved AS (
    UPDATE {{table}} AS o
    SET headers = CASE WHEN jsonb_typeof(o.headers) = 'object' THEN o.headers ELSE '{}'::jsonb END
                  || jsonb_build_object('Outbox-Replay', $4::text)
    WHERE o.id = ANY (ARRAY(SELECT id FROM parked))
    RETURNING o.id
),
audited AS (
    UPDATE {{audit}} SET count = count + (SELECT count(*) FROM moved) WHERE id = $2
)
SELECT coalesce((SELECT max(id) FROM picked), 0), (SELECT count(*) FROM picked),
       (SELECT count(*) FROM moved),
       CASE WHEN EXISTS (SELECT 1 FROM moved) THEN pg_notify($3, '') IS NULL END
