-- Whether shard leases are enabled: the shard table exists. $1 its
-- quoted, qualified name.
SELECT to_regclass($1) IS NOT NULL
