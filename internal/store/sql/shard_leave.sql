-- Leave: a dispatcher stopping gracefully, its shards released, drops its
-- membership so the others' share grows at once rather than a lease
-- later. $1 owner.
DELETE FROM {{shard_members}} WHERE owner = $1
