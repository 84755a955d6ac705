-- Wake the parked messages held back for a paused destination (see
-- pause_wake.sql), under snapshot cursors.
WITH woken AS (
    UPDATE {{parked}}
    SET available_at = now(), last_error = NULL
    WHERE status = 'pending' AND available_at > now() AND last_error = $1
    RETURNING 1
)
SELECT count(*) FROM woken
