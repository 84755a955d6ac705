-- Whether anything is left to deliver under snapshot cursors: a parked
-- message waiting (not dead; ordered ($1), not behind a dead one of its
-- aggregate, which holds it back until an operator acts), or a committed
-- row of some shard past the shard's cursor (not visible in done, and not
-- in the open window up to its last id).
SELECT EXISTS (SELECT 1 FROM {{parked}} AS p
               WHERE p.status = 'pending'
                 AND NOT ($1::boolean AND EXISTS (SELECT 1 FROM {{parked}} AS q
                                                  WHERE q.aggregate_id = p.aggregate_id AND q.id < p.id
                                                    AND q.status = 'dead')))
    OR EXISTS (
        SELECT 1
        FROM (SELECT h.shard, h.done, h.win, h.win_last, pg_current_snapshot() AS now FROM {{shards}} AS h OFFSET 0) AS s
        WHERE EXISTS (
            SELECT 1 FROM {{table}} AS o
            WHERE o.shard = s.shard AND o.xid >= pg_snapshot_xmax(s.done) AND o.xid < pg_snapshot_xmax(s.now)
              AND pg_visible_in_snapshot(o.xid, s.now)
              AND (s.win IS NULL OR NOT pg_visible_in_snapshot(o.xid, s.win) OR o.id > s.win_last))
           OR EXISTS (
            SELECT 1 FROM pg_snapshot_xip(s.done) AS x(xid)
            JOIN LATERAL (SELECT o.id, o.xid FROM {{table}} AS o
                          WHERE o.shard = s.shard AND o.xid = x.xid OFFSET 0) AS o ON true
            WHERE pg_visible_in_snapshot(x.xid, s.now)
              AND (s.win IS NULL OR NOT pg_visible_in_snapshot(o.xid, s.win) OR o.id > s.win_last)))
