-- Message: one row in full, by primary key. $1 id.
SELECT id, aggregate_type, aggregate_id, event_type, status, attempts,
       created_at, available_at, done_at, lease_until, lease_owner, last_error,
       payload::text, headers::text, lease_version, uid::text
FROM {{rows}}
WHERE id = $1
