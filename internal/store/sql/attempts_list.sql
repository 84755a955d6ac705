-- The newest $2 entries of message $1's attempt history, newest first.
SELECT at, dispatcher, attempt, duration_us, outcome, status, coalesce(error, '')
FROM {{attempts}}
WHERE message_id = $1
ORDER BY at DESC
LIMIT $2
