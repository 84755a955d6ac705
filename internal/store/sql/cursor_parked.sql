-- Read the parked messages that are due of each held shard, oldest first,
-- up to $4 per shard, leaving out the ids in flight ($5); ordered ($6),
-- only the first parked message of each aggregate (one parked before it,
-- dead or waiting, holds it back). It locks and writes nothing, and reads
-- only the shards $1 still holds under the tokens given.
-- $1 owner, $2 shards, $3 tokens, $4 rows per shard, $5 ids in flight,
-- $6 ordered.
SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
       o.created_at, p.attempts, o.headers::text, o.uid::text, p.shard, now(), false, {{cursor_origin}}
FROM unnest($2::integer[], $3::bigint[]) AS f(shard, token)
JOIN {{shards}} AS h ON h.shard = f.shard AND h.token = f.token AND h.owner = $1 AND h.lease_until > now()
JOIN LATERAL (SELECT p.id, p.shard, p.attempts FROM {{parked}} AS p
              WHERE p.shard = f.shard AND p.status = 'pending' AND p.available_at <= now()
                AND p.id <> ALL ($5::bigint[])
                AND NOT ($6::boolean AND EXISTS (SELECT 1 FROM {{parked}} AS q
                                                 WHERE q.aggregate_id = p.aggregate_id AND q.id < p.id))
              ORDER BY p.id
              LIMIT $4) AS p ON true
JOIN LATERAL (SELECT * FROM {{table}} AS o WHERE o.id = p.id) AS o ON true
