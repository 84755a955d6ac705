-- Leave: a dispatcher stopping gracefully drops its membership, so the
-- others' share grows at once rather than a lease later, and frees every
-- shard still recorded under its name: those it released already, and any
-- it holds without knowing (an acquire whose reply was lost). No other
-- dispatcher bears its name, and every verdict of its run is written by
-- now. $1 owner.
WITH freed AS (
    UPDATE {{shards}} SET owner = NULL, lease_until = NULL WHERE owner = $1
)
DELETE FROM {{shard_members}} WHERE owner = $1
