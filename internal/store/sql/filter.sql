-- Filter terms: each block headed "-- term: NAME" is one condition that
-- console_*.sql statements AND into their WHERE clause ({{where}}). $? is
-- replaced by the next parameter number: every value a user gives is a bind
-- parameter, never text in the statement.
--
-- The status terms are literals on purpose: the planner can use a partial
-- index (ready, leased, dead) only when it can prove the index predicate,
-- and a parameter hides the value from a generic plan.

-- term: status_pending
status = 'pending'
-- term: status_processing
status = 'processing'
-- term: status_done
status = 'done'
-- term: status_dead
status = 'dead'
-- term: cursor_status_dead
-- status_dead under snapshot cursors: the dead messages are the parked
-- ones, looked up by id (the derived status serves no index).
id = ANY (ARRAY(SELECT id FROM {{parked}} WHERE status = 'dead'))
-- term: event_type
event_type = $?
-- term: aggregate_type
aggregate_type = $?
-- term: aggregate_id
aggregate_id = $?
-- term: ids
id = ANY ($?::bigint[])
-- term: id_min
id >= $?
-- term: id_max
id <= $?
-- Keyset pagination: the page after id $? (newest first, then oldest first).
-- term: before
id < $?
-- term: after
id > $?
-- term: created_after
created_at >= $?
-- term: created_before
created_at < $?
-- Case-insensitive substring without LIKE, so % and _ in the text are plain
-- characters.
-- term: error_contains
strpos(lower(last_error), lower($?)) > 0
-- SQL/JSON path predicates. @@ yields NULL (no match) for a path that is not
-- a predicate, and never raises for a row whose payload lacks the path.
-- term: payload_path
payload @@ $?::jsonpath
-- term: header_path
headers @@ $?::jsonpath
