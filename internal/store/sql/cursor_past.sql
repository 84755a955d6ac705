-- The rows past their shard's cursor, as two CTEs that a statement puts
-- first in its WITH ({{cursor_past}}): s, each shard's cursor and the
-- current snapshot; past, the committed rows of each shard not visible in
-- its done snapshot nor in its open window up to the window's last id,
-- with their created_at, event_type and aggregate_type. Read through the
-- cursor index: the range from done's xmax to now's, and one probe per
-- transaction in progress in done (see cursor_load.sql), never a scan
-- that widens while an old transaction stays open.
s AS MATERIALIZED (
    SELECT h.shard, h.done, h.win, h.win_last, pg_current_snapshot() AS now FROM {{shards}} AS h
),
past AS (
    SELECT o.created_at, o.event_type, o.aggregate_type
    FROM s
    JOIN LATERAL (
        SELECT o.id, o.xid, o.created_at, o.event_type, o.aggregate_type FROM {{table}} AS o
        WHERE o.shard = s.shard AND o.xid >= pg_snapshot_xmax(s.done) AND o.xid < pg_snapshot_xmax(s.now)
          AND pg_visible_in_snapshot(o.xid, s.now)
        UNION ALL
        SELECT o.id, o.xid, o.created_at, o.event_type, o.aggregate_type
        FROM pg_snapshot_xip(s.done) AS x(xid)
        JOIN LATERAL (SELECT o.id, o.xid, o.created_at, o.event_type, o.aggregate_type FROM {{table}} AS o
                      WHERE o.shard = s.shard AND o.xid = x.xid OFFSET 0) AS o ON true
        WHERE pg_visible_in_snapshot(x.xid, s.now)
    ) AS o ON s.win IS NULL OR NOT pg_visible_in_snapshot(o.xid, s.win) OR o.id > s.win_last
)
