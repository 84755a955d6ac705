-- Finalize a batch under shard leases, in one statement. The shard rows
-- are held FOR SHARE with their tokens checked: a takeover (an UPDATE of
-- the shard row) waits for this statement's transaction, and one that
-- committed first changed the token, so a re-check excludes the shard and
-- none of its rows is written. Without the lock, a plain join reads the
-- shard row as of the statement's start and accepts writes of a shard
-- taken over meanwhile. Only rows still pending are written. A written
-- row reads as under row leases: attempts counts the deliveries made (the
-- one that finished it included) and lease_version is the token of the
-- delivery that wrote it, its shard's.
-- $1 owner, $2 shards, $3 tokens, $4 ids, $5 new statuses,
-- $6 delays in microseconds (pending only), $7 attempts to add,
-- $8 errors ('' keeps the previous one), $9 each row's created_at as read
-- (NULL: not compared), so that a write meant for a row that is gone
-- cannot land on another row given its id again, $10 each row's shard.
WITH held AS (
    SELECT s.shard, s.token FROM {{shards}} AS s
    JOIN unnest($2::integer[], $3::bigint[]) AS f(shard, token)
      ON s.shard = f.shard AND s.token = f.token
    WHERE s.owner = $1
    FOR SHARE OF s
),
-- The writes of the shards held, each with its shard's token: the UPDATE
-- then finds each row by its id, one probe per write. Matching the rows
-- to the held shards instead (o.shard = h.shard) lets a plan probe every
-- id in every shard held, shards x ids probes.
w AS (
    SELECT r.*, h.token
    FROM unnest($4::bigint[], $5::text[], $6::bigint[], $7::integer[], $8::text[], $9::timestamptz[], $10::integer[])
         AS r(id, status, delay_us, attempts, last_error, born, shard)
    JOIN held AS h ON h.shard = r.shard
)
UPDATE {{table}} AS o
SET status = w.status,
    available_at = CASE WHEN w.status = 'pending'
                        THEN now() + w.delay_us * interval '1 microsecond'
                        ELSE o.available_at END,
    attempts = o.attempts + w.attempts,
    last_error = CASE WHEN w.status = 'done' THEN NULL
                      WHEN w.last_error = '' THEN o.last_error
                      ELSE w.last_error END,
    done_at = CASE WHEN w.status = 'done' THEN now() END,
    lease_version = w.token
FROM w
WHERE o.id = w.id
  AND o.status = 'pending'
  AND o.shard = w.shard
  AND (w.born IS NULL OR o.created_at = w.born)
RETURNING o.id
