-- Read a prefix of each held shard's queue: pending, due rows in id order,
-- without locking or writing anything. The shard's lease is the ownership,
-- and the read names it: a shard whose lease this owner no longer holds
-- under the token given (taken over while it stalled, or run out) is not
-- read, so a dispatcher that stalled past its lease stops delivering at
-- its next read rather than at its next renewal.
--
-- Each shard is read after a position (the highest id the dispatcher read
-- of it), so a read does not walk what is already in flight; the ids in
-- flight above a position that is behind (a sweep from the front, which
-- finds rows that committed late with a lower id) are excluded. Each row
-- comes with prev, the previous unfinished row of its aggregate: the
-- dispatcher delivers the row only once prev is (in flight in its own
-- chain, or read just before it). A row whose prev is dead or waiting for
-- its retry is not read, nor are the rows of the aggregates the dispatcher
-- knows to be waiting: the aggregate waits for that row.
-- $1 shards, $2 the tokens they are held under, $3 positions, $4 rows per
-- shard, $5 owner, $6 ids in flight above their shard's position, $7
-- aggregates waiting, $8 heads only (no earlier unfinished row at all: an
-- isolated shard, read with nothing of it in flight, can deliver nothing
-- else, and a row it could not deliver would be read again and again), $9
-- ordered (unordered, no row's aggregate is looked at: prev is null, and
-- the probe's one-time filter keeps it from touching the index).
--
-- The shard is matched as a range of one, not with =: an equality makes
-- the planner drop shard from the ORDER BY, and "ORDER BY id" alone is
-- served by a primary-key walk through every done row. Ordered by shard
-- and id, only the shard index (shard, id) WHERE pending serves it. The
-- prev probe is one step back in the aggregate index (aggregate_id, id)
-- WHERE status <> 'done', whatever the aggregate's backlog; a probe of the
-- aggregate's head instead walks every done row of it still indexed.
SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
       o.created_at, o.attempts, o.headers::text, o.uid::text, o.shard, now(), o.prev_id
FROM unnest($1::integer[], $2::bigint[], $3::bigint[], $4::integer[]) AS s(shard, token, after, lim)
JOIN {{shards}} AS h ON h.shard = s.shard AND h.token = s.token AND h.owner = $5 AND h.lease_until > now(),
     LATERAL (SELECT o.*, prev.id AS prev_id
              FROM {{table}} AS o
              LEFT JOIN LATERAL (SELECT p.id, p.status, p.available_at FROM {{table}} AS p
                                 WHERE $9 AND p.aggregate_id = o.aggregate_id AND p.status <> 'done' AND p.id < o.id
                                 ORDER BY p.id DESC LIMIT 1) AS prev ON true
              WHERE o.shard >= s.shard AND o.shard <= s.shard AND o.status = 'pending'
                AND o.id > s.after AND o.available_at <= now() AND o.id <> ALL ($6::bigint[])
                AND o.aggregate_id <> ALL ($7::text[])
                AND (prev.id IS NULL OR NOT $8 AND prev.status = 'pending' AND prev.available_at <= now())
              ORDER BY o.shard, o.id
              LIMIT s.lim) AS o
