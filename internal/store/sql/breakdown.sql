-- Breakdown: rows not done, by {{key}} (event_type or aggregate_type, a
-- column name fixed in code), the $1 largest groups. Reads only the rows
-- the aggregate-head index holds (status <> 'done', repeated word for word
-- so the planner matches it): undelivered and dead, never the done rows.
SELECT {{key}},
       count(*) FILTER (WHERE status = 'pending'),
       count(*) FILTER (WHERE status = 'processing'),
       count(*) FILTER (WHERE status = 'dead')
FROM {{rows}}
WHERE status <> 'done'
GROUP BY {{key}}
ORDER BY count(*) DESC, {{key}}
LIMIT $1
