-- Renew: mark this dispatcher alive, record what it has in flight (for
-- status) and extend the leases it holds. $1 owner, $2 lease
-- (microseconds), $3 messages in flight. Returns the shards held, their
-- tokens and the number of dispatchers alive (this one included).
WITH member AS (
    INSERT INTO {{shard_members}} AS m (owner, seen, in_flight) VALUES ($1, now(), $3)
    ON CONFLICT (owner) DO UPDATE SET seen = now(), in_flight = $3
),
held AS (
    UPDATE {{shards}} AS s
    SET lease_until = now() + $2 * interval '1 microsecond'
    WHERE s.owner = $1 AND s.lease_until > now()
    RETURNING s.shard, s.token
)
SELECT h.shard, h.token,
       1 + (SELECT count(*) FROM {{shard_members}} AS m
            WHERE m.owner <> $1 AND m.seen > now() - $2 * interval '1 microsecond')
FROM held AS h
UNION ALL
-- One row even when nothing is held, to carry the count.
SELECT -1, 0, 1 + (SELECT count(*) FROM {{shard_members}} AS m
                   WHERE m.owner <> $1 AND m.seen > now() - $2 * interval '1 microsecond')
