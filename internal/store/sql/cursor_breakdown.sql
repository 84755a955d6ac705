-- Breakdown under snapshot cursors: the messages not done by {{key}}
-- (event_type or aggregate_type, a column name fixed in code), the $1
-- largest groups. Pending is the rows past their shard's cursor, read
-- through the cursor index as cursor_status.sql reads them, and the parked
-- ones waiting; dead the parked dead ones. Never reads the rows delivered.
WITH s AS MATERIALIZED (
    SELECT h.shard, h.done, h.win, h.win_last, pg_current_snapshot() AS now FROM {{shards}} AS h
),
past AS (
    SELECT o.{{key}} AS key
    FROM s
    JOIN LATERAL (
        SELECT o.id, o.xid, o.{{key}} FROM {{table}} AS o
        WHERE o.shard = s.shard AND o.xid >= pg_snapshot_xmax(s.done) AND o.xid < pg_snapshot_xmax(s.now)
          AND pg_visible_in_snapshot(o.xid, s.now)
        UNION ALL
        SELECT o.id, o.xid, o.{{key}}
        FROM pg_snapshot_xip(s.done) AS x(xid)
        JOIN LATERAL (SELECT o.id, o.xid, o.{{key}} FROM {{table}} AS o
                      WHERE o.shard = s.shard AND o.xid = x.xid OFFSET 0) AS o ON true
        WHERE pg_visible_in_snapshot(x.xid, s.now)
    ) AS o ON s.win IS NULL OR NOT pg_visible_in_snapshot(o.xid, s.win) OR o.id > s.win_last
),
parked AS (
    -- One primary-key probe per parked message (the parked table is the
    -- small one; a hash join would read the outbox whole).
    SELECT o.key, p.status
    FROM {{parked}} AS p
    JOIN LATERAL (SELECT o.{{key}} AS key FROM {{table}} AS o WHERE o.id = p.id OFFSET 0) AS o ON true
)
SELECT key,
       count(*) FILTER (WHERE status = 'pending'),
       0::bigint,
       count(*) FILTER (WHERE status = 'dead')
FROM (SELECT key, 'pending' AS status FROM past UNION ALL SELECT key, status FROM parked) AS u
GROUP BY key
ORDER BY count(*) DESC, key
LIMIT $1
