-- What shard-lease dispatchers report, for status and the gauges: the
-- messages they have in flight (pending in the table while they are
-- delivered: no claim is written), summed over the members whose shard
-- leases still hold, as of each one's last renewal; and the shard leases
-- that ran out without a takeover (a dispatcher that died or stalled).
SELECT coalesce((SELECT sum(m.in_flight) FROM {{shard_members}} AS m
                 WHERE EXISTS (SELECT 1 FROM {{shards}} AS s
                               WHERE s.owner = m.owner AND s.lease_until > now())), 0)::bigint,
       (SELECT count(*) FROM {{shards}} WHERE owner IS NOT NULL AND lease_until <= now())
