-- ReleaseUntracked: give back, pending and with the attempt refunded, the
-- rows an owner holds processing but does not know it holds: those of a
-- claim whose reply was lost (the connection died at its COMMIT, so the
-- claim committed but its caller saw an error). Without this they would
-- wait out their whole lease, and in ordered mode their aggregates with
-- them. Owner names are unique per process, so every row under it that the
-- caller does not name in $2 is such a row.
-- $1 owner, $2 ids the owner tracks (rows in flight).
UPDATE {{table}} AS o
SET status = 'pending',
    attempts = greatest(o.attempts - 1, 0),
    lease_owner = NULL,
    lease_until = NULL
WHERE o.status = 'processing'
  AND o.lease_owner = $1
  AND NOT (o.id = ANY ($2::bigint[]))
RETURNING o.id
