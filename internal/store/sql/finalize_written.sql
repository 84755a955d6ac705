-- FinalizeWritten: which outcomes an earlier finalize already wrote, for a
-- finalize retried after an error that may have come after its commit (a
-- reply lost with the connection). A row no longer processing, under the
-- same lease_version, with the status the outcome names (and for dead its
-- error, since the reaper's dead keeps the lease_version too) was written
-- by that outcome: a re-claim would have changed the lease_version.
-- $1 ids, $2 lease versions, $3 statuses, $4 errors as the store writes them,
-- $5 created_at as claimed (NULL: not compared): a row given the id again
-- is not the one written.
SELECT o.id, o.lease_version
FROM {{table}} AS o
JOIN unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[]) AS r(id, version, status, last_error, born)
  ON o.id = r.id
WHERE o.id = ANY ($1::bigint[])
  AND o.lease_version = r.version
  AND o.status = r.status
  AND (r.status <> 'dead' OR o.last_error = r.last_error)
  AND (r.born IS NULL OR o.created_at = r.born)
