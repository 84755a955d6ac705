-- UndeliveredTypes: the distinct (aggregate_type, event_type) pairs among
-- rows still to deliver, for checking a routing table at start-up. Reads only
-- pending and processing rows, through their partial indexes.
SELECT DISTINCT aggregate_type, event_type FROM (
    SELECT aggregate_type, event_type FROM {{table}} WHERE status = 'pending'
    UNION ALL
    SELECT aggregate_type, event_type FROM {{table}} WHERE status = 'processing'
) AS u
ORDER BY 1, 2
LIMIT 10000
