-- DeadList: dead rows, oldest first, after id $1, at most $2.
SELECT id, aggregate_type, aggregate_id, event_type, payload::text, created_at,
       attempts, lease_version, coalesce(last_error, ''), coalesce(uid::text, '')
FROM {{table}}
WHERE status = 'dead' AND id > $1
ORDER BY id
LIMIT $2
