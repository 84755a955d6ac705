-- Blocked: the aggregates whose oldest unfinished message is dead, with
-- messages pending behind it. Delivered in order (ordered row leases,
-- shard leases), those wait until an operator retries or skips the dead
-- head. Each pending row costs one probe of the aggregate index, which
-- holds unfinished rows only. $1 how many aggregates to list, those with
-- the oldest dead head first.
WITH behind AS (
    SELECT p.aggregate_id, h.id AS head
    FROM {{table}} AS p
    CROSS JOIN LATERAL (
        SELECT d.id, d.status FROM {{table}} AS d
        WHERE d.aggregate_id = p.aggregate_id AND d.status <> 'done'
        ORDER BY d.aggregate_id, d.id
        LIMIT 1) AS h
    WHERE p.status = 'pending' AND h.status = 'dead'
),
groups AS (
    SELECT aggregate_id, min(head) AS head, count(*) AS waiting FROM behind GROUP BY aggregate_id
)
SELECT (SELECT count(*) FROM groups),
       (SELECT coalesce(sum(waiting), 0) FROM groups)::bigint,
       coalesce((SELECT jsonb_agg(jsonb_build_object('aggregate_id', g.aggregate_id, 'dead_id', g.head,
                                                     'waiting', g.waiting) ORDER BY g.head)
                 FROM (SELECT * FROM groups ORDER BY head LIMIT $1) AS g), '[]'::jsonb)
