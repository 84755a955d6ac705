-- Look: what balancing needs between renewals, read without writing: how
-- many shards no live lease holds (released, or run out), and how many
-- dispatchers are alive (this one included), so that a dispatcher short
-- of its share takes free shards and one beyond it (it took shards while
-- the others were away, as after an outage) gives them back, each within a
-- poll interval (backed off up to the idle poll maximum while nothing is in
-- flight and the shares are fair). $1 owner, $2 lease (microseconds).
SELECT (SELECT count(*) FROM {{shards}} WHERE owner IS NULL OR lease_until <= now()),
       1 + (SELECT count(*) FROM {{shard_members}} AS m
            WHERE m.owner <> $1 AND m.seen > now() - $2 * interval '1 microsecond')
