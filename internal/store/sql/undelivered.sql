-- Undelivered: whether any row still awaits delivery: processing, or pending
-- and not stuck behind a dead head of its aggregate when $1 (ordered).
SELECT EXISTS (SELECT 1 FROM {{table}} WHERE status = 'processing')
    OR EXISTS (
        SELECT 1 FROM {{table}} AS o
        WHERE o.status = 'pending'
          AND NOT ($1::boolean AND EXISTS (
              SELECT 1 FROM {{table}} AS prev
              WHERE prev.aggregate_id = o.aggregate_id
                AND prev.id < o.id
                AND prev.status = 'dead'))
    )
