-- Wake the messages held back for a paused destination (their last error
-- is $1, store.PausedError): due now, the mark cleared. Messages of a
-- destination still paused are held back again when next claimed; the
-- others go. Returns how many it woke. A retry's backoff (any other last
-- error) is left alone.
WITH woken AS (
    UPDATE {{table}}
    SET available_at = now(), last_error = NULL
    WHERE status = 'pending' AND available_at > now() AND last_error = $1
    RETURNING 1
)
SELECT count(*) FROM woken
