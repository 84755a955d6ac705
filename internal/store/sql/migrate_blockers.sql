-- MigrateBlockers: the sessions that hold a lock on the table while a
-- migration step waits for one, oldest transaction first, for the log line
-- that says what migrate is waiting for. $1 the table's quoted name.
SELECT l.pid, l.mode,
       coalesce(a.application_name, ''), coalesce(a.state, ''),
       coalesce(extract(epoch FROM now() - a.xact_start)::float8, 0)
FROM pg_catalog.pg_locks AS l
LEFT JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.granted
  AND l.relation = to_regclass($1)
  AND l.pid <> pg_backend_pid()
ORDER BY a.xact_start NULLS LAST
LIMIT 5
