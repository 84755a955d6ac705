-- Free: how many shards no live lease holds (released, or run out); a
-- read of the small shard table, so that a dispatcher short of its share
-- looks every poll interval without writing.
SELECT count(*) FROM {{shards}} WHERE owner IS NULL OR lease_until <= now()
