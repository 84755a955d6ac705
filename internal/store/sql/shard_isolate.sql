-- Isolation bookkeeping of shards held under these tokens ($1 owner,
-- $2 shards, $3 tokens, $4 ids). An id declares the message about to be
-- delivered alone in its shard: if the owner dies now, that message is
-- the one charged (shard_acquire.sql); declared again after a takeover,
-- its strikes go on counting, a new one starts at none. A NULL id ends
-- the shard's isolation. Returns the shards written; a shard missing
-- from them was lost.
UPDATE {{shards}} AS s
SET strike_id = r.id,
    strikes = CASE WHEN r.id IS NOT NULL AND r.id = s.strike_id THEN s.strikes ELSE 0 END,
    isolate_through = CASE WHEN r.id IS NULL THEN NULL ELSE s.isolate_through END
FROM unnest($2::integer[], $3::bigint[], $4::bigint[]) AS r(shard, token, id)
WHERE s.shard = r.shard AND s.token = r.token AND s.owner = $1
RETURNING s.shard
