-- RetryNow: messages waiting for a later attempt (pending, due later) made
-- due now, and the dispatchers woken. Nothing else changes: the attempts
-- used stay used. A message processing, done or dead is left alone, so
-- nothing under a lease is written. $1 ids, $2 the wake-up channel; the
-- notification's payload, 'due' (store.NotifyDue), tells the dispatchers
-- to look again at what they know to wait.
WITH due AS (
    UPDATE {{table}}
    SET available_at = now()
    WHERE id = ANY ($1) AND status = 'pending' AND available_at > now()
    RETURNING id
)
SELECT id, pg_notify($2, 'due') IS NULL FROM due ORDER BY id
