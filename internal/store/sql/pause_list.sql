-- The pauses in force, the whole table's ('') first.
SELECT route, paused_by, paused_at, reason FROM {{pauses}} ORDER BY route
