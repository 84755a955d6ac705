-- Take up to $3 shards that are free (released) or whose lease ran out.
-- $1 owner, $2 lease (microseconds), $3 how many. A shard whose owner did
-- not release it gets a strike against its head (the lowest pending id):
-- the same head struck again counts up, a new head starts at one.
WITH free AS (
    SELECT s.shard FROM {{shards}} AS s
    WHERE s.owner IS NULL OR s.lease_until <= now()
    ORDER BY s.shard
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
head AS (
    SELECT f.shard, (SELECT min(o.id) FROM {{table}} AS o
                     WHERE o.shard = f.shard AND o.status = 'pending') AS id
    FROM free AS f
)
UPDATE {{shards}} AS s
SET owner = $1,
    token = s.token + 1,
    lease_until = now() + $2 * interval '1 microsecond',
    strike_id = CASE WHEN s.owner IS NULL THEN s.strike_id ELSE h.id END,
    strikes = CASE WHEN s.owner IS NULL THEN s.strikes
                   WHEN h.id IS NULL THEN 0
                   WHEN h.id = s.strike_id THEN s.strikes + 1
                   ELSE 1 END
FROM head AS h
WHERE s.shard = h.shard
RETURNING s.shard, s.token, s.strike_id, s.strikes
