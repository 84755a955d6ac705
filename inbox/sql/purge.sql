-- Purge: delete one bounded batch of ids received before now() - $1 µs, at
-- most $2 rows, oldest first. Returns the number deleted.
WITH victims AS (
    SELECT consumer, message_id FROM {{table}}
    WHERE received_at < now() - $1 * interval '1 microsecond'
    ORDER BY received_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM {{table}} AS i USING victims AS v
WHERE i.consumer = v.consumer AND i.message_id = v.message_id
