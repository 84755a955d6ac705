-- Read pending rows of the shards held, oldest first, per shard, without
-- locking or writing anything: the shard's lease is the ownership. No id
-- cursor: a row whose id is below others but committed later is read the
-- next time. $1 shards, $2 ids already in flight, $3 rows per shard.
--
-- The shard is matched as a range of one, not with =: an equality makes
-- the planner drop shard from the ORDER BY, and "ORDER BY id" alone is
-- served by a primary-key walk through every done row. Ordered by shard
-- and id, only the shard index (shard, id) WHERE pending serves it.
SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
       o.created_at, o.attempts, o.headers::text, o.shard, now()
FROM unnest($1::integer[]) AS s(shard),
     LATERAL (SELECT * FROM {{table}} AS o
              WHERE o.shard >= s.shard AND o.shard <= s.shard AND o.status = 'pending'
                AND o.available_at <= now() AND o.id <> ALL ($2::bigint[])
              ORDER BY o.shard, o.id
              LIMIT $3) AS o
