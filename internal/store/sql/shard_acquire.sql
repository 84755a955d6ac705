-- Take up to $3 shards that are free (released) or whose lease ran out.
-- $1 owner, $2 lease (microseconds), $3 how many, $4 how many messages an
-- owner may hold in flight in one shard.
--
-- A shard whose owner did not release it (it died or stalled) is taken
-- with what its owner may have had in flight unknown, so nothing is
-- charged for the crash but the message the owner had declared it was
-- delivering alone (strike_id, see shard_isolate.sql), if still pending:
-- its attempts and the shard's strikes count the crash. And the shard is
-- delivered one message at a time up to isolate_through, the $4-th lowest
-- pending id (beyond it nothing can have been in flight), so that a
-- message that crashes its owner is, the next time, alone in flight and
-- charged. A released shard is taken as it was left.
WITH free AS (
    SELECT s.shard, s.owner IS NOT NULL AS expired, s.strike_id
    FROM {{shards}} AS s
    WHERE s.owner IS NULL OR s.lease_until <= now()
    ORDER BY s.shard
    LIMIT $3
    FOR UPDATE SKIP LOCKED
),
charged AS (
    UPDATE {{table}} AS o
    SET attempts = o.attempts + 1
    FROM free AS f
    WHERE f.expired AND o.id = f.strike_id AND o.shard = f.shard AND o.status = 'pending'
    RETURNING f.shard, o.id, o.attempts
),
reach AS (
    SELECT f.shard,
           (SELECT max(p.id) FROM (SELECT o.id FROM {{table}} AS o
                                   WHERE o.shard >= f.shard AND o.shard <= f.shard AND o.status = 'pending'
                                   ORDER BY o.shard, o.id
                                   LIMIT $4) AS p) AS through
    FROM free AS f
    WHERE f.expired
)
UPDATE {{shards}} AS s
SET owner = $1,
    token = s.token + 1,
    lease_until = now() + $2 * interval '1 microsecond',
    strike_id = CASE WHEN NOT f.expired THEN s.strike_id ELSE c.id END,
    strikes = CASE WHEN NOT f.expired THEN s.strikes
                   WHEN c.id IS NOT NULL THEN s.strikes + 1
                   ELSE 0 END,
    isolate_through = CASE WHEN NOT f.expired THEN s.isolate_through
                           ELSE nullif(greatest(coalesce(s.isolate_through, 0), coalesce(r.through, 0)), 0) END
FROM free AS f
LEFT JOIN charged AS c ON c.shard = f.shard
LEFT JOIN reach AS r ON r.shard = f.shard
WHERE s.shard = f.shard
RETURNING s.shard, s.token, s.strike_id, s.strikes, s.isolate_through, c.attempts
