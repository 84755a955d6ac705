-- Read pending rows of the shards held, oldest first, per shard, without
-- locking or writing anything: the shard's lease is the ownership, and the
-- read names it: a shard whose lease this owner no longer holds under the
-- token given (taken over while it stalled, or run out) is not read, so a
-- dispatcher that stalled past its lease stops delivering at its next read
-- rather than at its next renewal. No id cursor: a row whose id is below
-- others but committed later is read the next time. Only the head of each
-- aggregate is read (no earlier row of it unfinished, in flight included:
-- those are pending), so an aggregate's messages are delivered one at a
-- time, in id order, and a failing or dead one holds back its own
-- aggregate only.
-- $1 shards, $2 ids already in flight, $3 rows per shard, $4 the tokens
-- the shards are held under, $5 owner.
--
-- The shard is matched as a range of one, not with =: an equality makes
-- the planner drop shard from the ORDER BY, and "ORDER BY id" alone is
-- served by a primary-key walk through every done row. Ordered by shard
-- and id, only the shard index (shard, id) WHERE pending serves it.
SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
       o.created_at, o.attempts, o.headers::text, o.uid::text, o.shard, now()
FROM unnest($1::integer[], $4::bigint[]) AS s(shard, token)
JOIN {{shards}} AS h ON h.shard = s.shard AND h.token = s.token AND h.owner = $5 AND h.lease_until > now(),
     LATERAL (SELECT * FROM {{table}} AS o
              WHERE o.shard >= s.shard AND o.shard <= s.shard AND o.status = 'pending'
                AND o.available_at <= now() AND o.id <> ALL ($2::bigint[])
                AND NOT EXISTS (SELECT 1 FROM {{table}} AS p
                                WHERE p.aggregate_id = o.aggregate_id AND p.status <> 'done'
                                  AND p.id < o.id)
              ORDER BY o.shard, o.id
              LIMIT $3) AS o
