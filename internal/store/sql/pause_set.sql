-- Pause: the destination $1 ('' the whole table) paused by $2 for $3,
-- unless it is paused already: then the pause in force is returned as it
-- is (its author and time kept), with false.
WITH made AS (
    INSERT INTO {{pauses}} (route, paused_by, reason)
    VALUES ($1, $2, $3)
    ON CONFLICT (route) DO NOTHING
    RETURNING route, paused_by, paused_at, reason
)
SELECT route, paused_by, paused_at, reason, true FROM made
UNION ALL
SELECT route, paused_by, paused_at, reason, false FROM {{pauses}}
WHERE route = $1 AND NOT EXISTS (SELECT 1 FROM made)
