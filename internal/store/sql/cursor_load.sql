-- Load the ids of each held shard's window: the committed rows of the
-- shard whose transaction is visible in the window's snapshot (hi) and not
-- in the shard's done snapshot, after a position, in id order, up to $6
-- per shard. It locks and writes nothing, and reads only the shards $1
-- still holds under the tokens given.
--
-- A shard's window is the one the caller names ($4 hi, $5 after: a window
-- it is delivering), else the open one stored (win, win_last: a window its
-- previous owner did not finish), else a new one whose hi is this
-- statement's own snapshot. Once hi is fixed the window's rows are fixed:
-- every transaction visible in hi has ended, and a row that was rolled
-- back is visible to no statement. In one statement, "visible in hi" and
-- "visible to the statement" coincide for the rows of a new window.
--
-- Candidates come from the index (shard, xid, id): the range from done's
-- xmax up to hi's, plus one probe per transaction that was in progress in
-- done (below done's xmax, so outside the range). A transaction open for
-- hours then costs one probe per load, never a range that widens. Each
-- probe is a lateral equality (an xid = ANY(list) filter would be planned
-- over the whole shard), and the shard CTE is materialized so that the
-- snapshots are built once per shard, not once per index entry.
--
-- Every shard read returns one row with its hi and done, then its ids
-- (id NULL when the window has none after the position).
-- $1 owner, $2 shards, $3 tokens, $4 his (NULL: the stored or a new
-- window), $5 positions (the last id delivered in the window; NULL with a
-- NULL hi), $6 ids per shard.
WITH s AS MATERIALIZED (
    SELECT h.shard, h.done,
           coalesce(f.hi::pg_snapshot, h.win, pg_current_snapshot()) AS hi,
           CASE WHEN f.hi IS NOT NULL THEN f.after ELSE coalesce(h.win_last, 0) END AS after
    FROM unnest($2::integer[], $3::bigint[], $4::text[], $5::bigint[]) AS f(shard, token, hi, after)
    JOIN {{shards}} AS h ON h.shard = f.shard AND h.token = f.token AND h.owner = $1 AND h.lease_until > now()
)
SELECT s.shard, s.hi::text, s.done::text, s.after, c.id
FROM s
LEFT JOIN LATERAL (
    SELECT u.id FROM (
        SELECT o.id FROM {{table}} AS o
        WHERE o.shard = s.shard
          AND o.xid >= pg_snapshot_xmax(s.done) AND o.xid < pg_snapshot_xmax(s.hi)
          AND pg_visible_in_snapshot(o.xid, s.hi)
          AND o.id > s.after
        UNION ALL
        SELECT o.id
        FROM pg_snapshot_xip(s.done) AS x(xid)
        JOIN LATERAL (SELECT o.id FROM {{table}} AS o
                      WHERE o.shard = s.shard AND o.xid = x.xid AND o.id > s.after) AS o ON true
        WHERE pg_visible_in_snapshot(x.xid, s.hi)
    ) AS u
    ORDER BY u.id
    LIMIT $6
) AS c ON true
ORDER BY s.shard, c.id
