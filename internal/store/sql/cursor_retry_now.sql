-- RetryNow under snapshot cursors: parked messages waiting for a later
-- attempt made due now, and the dispatchers woken ('due': see
-- retry_now.sql). $1 ids, $2 the wake-up channel.
WITH due AS (
    UPDATE {{parked}}
    SET available_at = now()
    WHERE id = ANY ($1) AND status = 'pending' AND available_at > now()
    RETURNING id
)
SELECT id, pg_notify($2, 'due') IS NULL FROM due ORDER BY id
