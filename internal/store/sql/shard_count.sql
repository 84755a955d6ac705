-- How many shards the table has; the shard table exists (shard_exists.sql).
SELECT count(*) FROM {{shards}}
