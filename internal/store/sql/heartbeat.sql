-- Heartbeat: extend the leases of rows this owner still holds, fenced like
-- every other write; RETURNING names the leases (id and version) extended, so
-- the caller learns which leases are lost.
-- $1 owner, $2 ids, $3 lease versions, $4 lease (µs).
UPDATE {{table}} AS o
SET lease_until = now() + $4 * interval '1 microsecond'
FROM unnest($2::bigint[], $3::bigint[], array_fill('processing'::text, ARRAY[cardinality($2::bigint[])]))
     AS r(id, version, fenced)
-- The status to fence on comes with each row, not as the constant
-- 'processing', which would let the plan walk the partial index of
-- processing rows (see finalize.sql): each row is found by its id.
WHERE o.id = r.id
  AND o.status = r.fenced
  AND o.lease_version = r.version
  AND o.lease_owner = $1
RETURNING o.id, o.lease_version
