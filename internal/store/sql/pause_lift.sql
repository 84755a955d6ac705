-- Resume: the pause of the destination $1 ('' the whole table) deleted;
-- no row when it was not paused.
DELETE FROM {{pauses}} WHERE route = $1
RETURNING route, paused_by, paused_at, reason
