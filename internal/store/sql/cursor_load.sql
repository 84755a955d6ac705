-- Load the ids of each held shard's window: the committed rows of the
-- shard whose transaction is visible in the window's snapshot (hi) and not
-- in the shard's done snapshot, after a position, in id order, up to $7
-- per shard. It locks and writes nothing, and reads only the shards $1
-- still holds under the tokens given.
--
-- A shard's window is the one the caller names ($5 hi, $6 after: a window
-- it is delivering), else a new one after the done snapshot it names ($4:
-- the window before it is delivered, its cursor not yet advanced), else
-- the open one stored (win, win_last: a window its previous owner did not
-- finish), else a new one after the stored done. A new window's hi is this
-- statement's own snapshot. Once hi is fixed the window's rows are fixed:
-- every transaction visible in hi has ended, and a row that was rolled
-- back is visible to no statement. In one statement, "visible in hi" and
-- "visible to the statement" coincide for the rows of a new window.
--
-- Candidates come from the index (shard, xid, id): the range from done's
-- xmax up to hi's, plus one probe per transaction that was in progress in
-- done (below done's xmax, so outside the range). A transaction open for
-- hours then costs one probe per load, never a range that widens. Each
-- probe is a lateral equality kept from being flattened into a join
-- (OFFSET 0: flattened, it was planned as a hash join over a walk of the
-- primary key after the position; an xid = ANY(list) filter is planned
-- over the whole shard), and the shard CTE is materialized so that the
-- snapshots are built once per shard, not once per index entry.
--
-- Every shard read returns one row: its done and hi, its position,
-- whether the window was open before, its ids in id order (an array: the
-- snapshots are sent once per shard, not once per id), and whether the
-- server is in recovery: a hot standby's snapshot lists no transaction in
-- progress, so a window read there would count a transaction running on
-- the primary as delivered and skip its rows once it commits (a failover's
-- standby answers before it is promoted). The caller refuses such a read.
--
-- A done or hi the caller names is a snapshot it took earlier, on the
-- origin it names with it ($8, see cursor_origin.sql): on another origin
-- (a failover since) the shard is returned moved, with no ids, for the
-- caller to load it again from what is stored; every row returns the
-- statement's origin.
-- $1 owner, $2 shards, $3 tokens, $4 dones (NULL: the stored one), $5 his
-- (NULL: a new window, or the stored one), $6 positions (the last id
-- delivered in the window named), $7 ids per shard, $8 the origins of the
-- dones and his named.
WITH o AS MATERIALIZED (
    SELECT {{cursor_origin}} AS origin
),
s AS MATERIALIZED (
    SELECT h.shard, (f.done IS NOT NULL OR f.hi IS NOT NULL) AND f.origin IS DISTINCT FROM o.origin AS moved,
           coalesce(f.done::pg_snapshot, h.done) AS done,
           CASE WHEN f.hi IS NOT NULL THEN f.hi::pg_snapshot
                WHEN f.done IS NOT NULL THEN pg_current_snapshot()
                ELSE coalesce(h.win, pg_current_snapshot()) END AS hi,
           CASE WHEN f.hi IS NOT NULL THEN f.after
                WHEN f.done IS NOT NULL THEN 0
                ELSE coalesce(h.win_last, 0) END AS after,
           f.hi IS NOT NULL OR f.done IS NULL AND h.win IS NOT NULL AS resumed
    FROM o, unnest($2::integer[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $8::text[])
         AS f(shard, token, done, hi, after, origin)
    JOIN {{shards}} AS h ON h.shard = f.shard AND h.token = f.token AND h.owner = $1 AND h.lease_until > now()
)
SELECT s.shard, s.done::text, s.hi::text, s.after, s.resumed, c.ids, pg_is_in_recovery(), s.moved, o.origin
FROM o, s
CROSS JOIN LATERAL (
    SELECT coalesce(array_agg(v.id ORDER BY v.id), '{}') AS ids FROM (
        SELECT u.id FROM (
            SELECT o.id FROM {{table}} AS o
            WHERE o.shard = s.shard
              AND o.xid >= pg_snapshot_xmax(s.done) AND o.xid < pg_snapshot_xmax(s.hi)
              AND pg_visible_in_snapshot(o.xid, s.hi)
              AND o.id > s.after AND NOT s.moved
            UNION ALL
            SELECT o.id
            FROM pg_snapshot_xip(s.done) AS x(xid)
            JOIN LATERAL (SELECT o.id FROM {{table}} AS o
                          WHERE o.shard = s.shard AND o.xid = x.xid AND o.id > s.after
                          OFFSET 0) AS o ON true
            WHERE pg_visible_in_snapshot(x.xid, s.hi) AND NOT s.moved
        ) AS u
        ORDER BY u.id
        LIMIT $7
    ) AS v
) AS c
ORDER BY s.shard
