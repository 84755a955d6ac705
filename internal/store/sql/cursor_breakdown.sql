-- Breakdown under snapshot cursors: the messages not done by {{key}}
-- (event_type or aggregate_type, a column name fixed in code), the $1
-- largest groups. Pending is the rows past their shard's cursor
-- (cursor_past.sql) and the parked ones waiting; dead the parked dead
-- ones. Never reads the rows delivered.
WITH {{cursor_past}},
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
FROM (SELECT {{key}} AS key, 'pending' AS status FROM past UNION ALL SELECT key, status FROM parked) AS u
GROUP BY key
ORDER BY count(*) DESC, key
LIMIT $1
