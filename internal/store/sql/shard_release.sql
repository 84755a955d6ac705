-- Release shards this owner holds under these tokens: another dispatcher
-- may take them at once, with no strike. $1 owner, $2 shards, $3 tokens.
UPDATE {{shards}} AS s
SET owner = NULL, lease_until = NULL
FROM unnest($2::integer[], $3::bigint[]) AS r(shard, token)
WHERE s.shard = r.shard AND s.token = r.token AND s.owner = $1
RETURNING s.shard
