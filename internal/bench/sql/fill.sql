-- Fill: $1 rows of status $2 ('pending' or 'done'), spread over $3
-- aggregates in turn, for a bench table created by migrate.
INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, done_at)
SELECT 'order', (g % $3)::text, 'OrderCreated', jsonb_build_object('n', g, 'note', 'benchmark message'),
       $2, CASE WHEN $2 = 'done' THEN now() END
FROM generate_series(1, $1) AS g
