-- The shard-lease dispatchers holding shards: what each reported in
-- flight at its last renewal, its latest lease expiry (the freshest sign of
-- life), its shard leases that ran out, and the shards it holds.
SELECT m.owner, m.in_flight::bigint, max(s.lease_until),
       count(*) FILTER (WHERE s.lease_until <= now()),
       array_agg(s.shard ORDER BY s.shard)
FROM {{shard_members}} AS m
JOIN {{shards}} AS s ON s.owner = m.owner
GROUP BY m.owner, m.in_flight
ORDER BY m.owner
