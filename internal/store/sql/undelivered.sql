-- Undelivered: whether any row still awaits delivery: processing, or pending
-- and not stuck behind a dead head of its aggregate when $1 (ordered).
-- The ORDER BY makes the ready index the way in: with a tenth of the table
-- pending the planner expects a sequential scan to meet one early, but the
-- pending rows are the newest, at the end of the heap, behind every done
-- row. A scalar subquery, since the planner drops ORDER BY and LIMIT from
-- an EXISTS.
SELECT EXISTS (SELECT 1 FROM {{table}} WHERE status = 'processing')
    OR (
        SELECT true FROM {{table}} AS o
        WHERE o.status = 'pending'
          AND NOT ($1::boolean AND EXISTS (
              SELECT 1 FROM {{table}} AS prev
              WHERE prev.aggregate_id = o.aggregate_id
                AND prev.id < o.id
                AND prev.status = 'dead'))
        ORDER BY o.available_at, o.id
        LIMIT 1
    ) IS NOT NULL
