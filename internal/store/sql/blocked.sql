-- Blocked: the aggregates whose oldest unfinished message is dead, with
-- messages pending behind it. Delivered in order (ordered row leases,
-- shard leases), those wait until an operator retries or skips the dead
-- head. It starts from the dead rows (the dead index), usually few: each
-- costs a probe of the aggregate index, which holds unfinished rows only,
-- and a blocked one a count of what waits behind it, so the cost follows
-- what is blocked, not the backlog. $1 how many aggregates to list, those
-- with the oldest dead head first.
WITH heads AS (
    SELECT d.aggregate_id, d.id
    FROM {{table}} AS d
    WHERE d.status <> 'done' AND d.status = 'dead'
      AND NOT EXISTS (SELECT 1 FROM {{table}} AS e
                      WHERE e.aggregate_id = d.aggregate_id AND e.status <> 'done' AND e.id < d.id)
),
groups AS (
    SELECT h.aggregate_id, h.id AS head,
           (SELECT count(*) FROM {{table}} AS p
            WHERE p.aggregate_id = h.aggregate_id AND p.status <> 'done' AND p.status = 'pending'
              AND p.id > h.id) AS waiting
    FROM heads AS h
)
SELECT (SELECT count(*) FROM groups WHERE waiting > 0),
       (SELECT coalesce(sum(waiting), 0) FROM groups)::bigint,
       coalesce((SELECT jsonb_agg(jsonb_build_object('aggregate_id', g.aggregate_id, 'dead_id', g.head,
                                                     'waiting', g.waiting) ORDER BY g.head)
                 FROM (SELECT * FROM groups WHERE waiting > 0 ORDER BY head LIMIT $1) AS g), '[]'::jsonb)
