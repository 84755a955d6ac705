-- Rows a row-lease dispatcher left processing in these shards, their
-- leases expired, go back to pending so shard leases deliver them (a
-- table switched from row to shard leases). The row dispatcher's late
-- finalize is fenced off by status, as after any reclaim. $1 shards.
UPDATE {{table}} AS o
SET status = 'pending', lease_owner = NULL, lease_until = NULL
WHERE o.status = 'processing' AND o.lease_until < now() AND o.shard = ANY ($1::integer[])
