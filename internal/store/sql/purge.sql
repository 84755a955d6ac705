-- Purge: delete one bounded batch of done rows finished before now() - $1 µs,
-- in (done_at, id) order after ($2, $3), the last row of the previous batch
-- ('-infinity', 0 for the first). $4 the batch. Returns how many it deleted
-- and the last deleted row's (done_at, id), the cursor for the next batch
-- (NULLs when none).
--
-- The rows come from the front of the done index, up to the cutoff: a batch
-- reads about what it deletes, whatever the table holds besides (young done
-- rows, pending, dead). The cursor keeps a batch from walking again over the
-- index entries of the rows earlier batches deleted, which stay until
-- vacuum can remove them (later if a long transaction holds them visible).
-- SKIP LOCKED lets several replicas purge at once without queueing on each
-- other's batches; = ANY(ARRAY(...)) keeps the DELETE a primary-key probe.
WITH victims AS (
    SELECT o.id FROM {{table}} AS o
    WHERE o.status = 'done' AND o.done_at < now() - $1 * interval '1 microsecond'
      AND (o.done_at, o.id) > ($2::timestamptz, $3::bigint)
    ORDER BY o.done_at, o.id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM {{table}} AS o WHERE o.id = ANY (ARRAY(SELECT id FROM victims))
    RETURNING o.id, o.done_at
),
-- Their attempt histories go with them.
history AS (
    DELETE FROM {{attempts}} AS a WHERE a.message_id = ANY (ARRAY(SELECT id FROM deleted))
)
SELECT count(*),
       (array_agg(done_at ORDER BY done_at DESC, id DESC))[1],
       (array_agg(id ORDER BY done_at DESC, id DESC))[1]
FROM deleted
