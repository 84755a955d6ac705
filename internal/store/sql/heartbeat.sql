-- Heartbeat: extend the leases of rows this owner still holds, fenced like
-- every other write; RETURNING names the leases (id and version) extended, so
-- the caller learns which leases are lost.
-- $1 owner, $2 ids, $3 lease versions, $4 lease (µs).
UPDATE {{table}} AS o
SET lease_until = now() + $4 * interval '1 microsecond'
FROM unnest($2::bigint[], $3::bigint[]) AS r(id, version)
WHERE o.id = ANY ($2::bigint[])
  AND o.id = r.id
  AND o.status = 'processing'
  AND o.lease_version = r.version
  AND o.lease_owner = $1
RETURNING o.id, o.lease_version
