-- ClaimOrdered: reap, then lease up to $2 heads of aggregates (the lowest-id
-- unfinished row of each aggregate_id), in one statement and one commit.
-- $1 owner, $2 batch, $3 lease (µs), $4 max attempts, $5 clear this owner's
-- waiter row, $6 cursor (aggregate_id to start after), $7 start at $6
-- inclusive (a fresh sweep, with $6 = '', which no text sorts before),
-- $8 most aggregates to visit. Whether a sweep is fresh is $7 alone: ''
-- is an aggregate_id like any other, so a cursor of '' means "after ''".
-- $9 the expired leases the reap looks at: those that ran out since then
-- (see claim.sql).
--
-- The heads are found by a skip scan of the unfinished-rows index: one probe
-- per aggregate, from the cursor on, stopping once $2 claimable heads are
-- found or $8 aggregates were visited. The cost is bounded by the batch and
-- the aggregates whose head is busy (in flight, backing off, dead), never by
-- how many messages queue behind a head. Successive claims continue from the
-- cursor, so every aggregate is visited in turn.
--
-- It returns at least one row: the claimed rows, each with the cursor for
-- the next claim, or one row of NULLs but for the cursor when none was
-- claimed. The cursor is NULL when the sweep reached the last aggregate.
WITH RECURSIVE {{reap}}
walk AS (
    SELECT s.aggregate_id, s.id, s.ok, s.ok::int AS found, 1 AS n
    FROM (SELECT h.aggregate_id, h.id,
                 (h.status = 'pending' AND h.available_at <= now())
                 OR (h.status = 'processing' AND h.lease_until < now() AND h.attempts < $4) AS ok
          FROM {{table}} AS h
          WHERE h.status <> 'done' AND h.aggregate_id >= $6 AND (h.aggregate_id > $6 OR $7::boolean)
          ORDER BY h.aggregate_id, h.id
          LIMIT 1) AS s
  UNION ALL
    SELECT s.aggregate_id, s.id, s.ok, w.found + s.ok::int, w.n + 1
    FROM walk AS w
    CROSS JOIN LATERAL (
          SELECT h.aggregate_id, h.id,
                 (h.status = 'pending' AND h.available_at <= now())
                 OR (h.status = 'processing' AND h.lease_until < now() AND h.attempts < $4) AS ok
          FROM {{table}} AS h
          WHERE h.status <> 'done' AND h.aggregate_id > w.aggregate_id
          ORDER BY h.aggregate_id, h.id
          LIMIT 1) AS s
    WHERE w.found < $2 AND w.n < $8
),
last AS (
    SELECT aggregate_id, found, n FROM walk ORDER BY n DESC LIMIT 1
),
picked AS (
    -- The conditions again: a head may have changed since the snapshot.
    SELECT o.id FROM {{table}} AS o
    WHERE o.id = ANY (ARRAY(SELECT id FROM walk WHERE ok))
      AND ((o.status = 'pending' AND o.available_at <= now())
           OR (o.status = 'processing' AND o.lease_until < now() AND o.attempts < $4))
    ORDER BY o.id
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE {{table}} AS o
    SET status = 'processing',
        lease_owner = $1,
        lease_until = now() + $3 * interval '1 microsecond',
        lease_version = o.lease_version + 1,
        attempts = o.attempts + 1
    WHERE o.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
              o.created_at, o.attempts, o.lease_version, o.headers::text, o.uid::text
)
SELECT c.id, c.aggregate_type, c.aggregate_id, c.event_type, c.payload,
       c.created_at, c.attempts, c.lease_version, c.headers, c.uid, now(),
       -- Stopped for the batch or the visit limit: resume after the last
       -- aggregate seen. Ran out of aggregates: the next sweep starts over.
       (SELECT CASE WHEN l.found >= $2 OR l.n >= $8 THEN l.aggregate_id END FROM last AS l)
FROM (SELECT 1) AS one
LEFT JOIN claimed AS c ON true
