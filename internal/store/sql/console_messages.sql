-- Messages: one page of summaries, keyset-paginated by id. $1 is the page
-- size; {{where}} holds the filter terms (filter.sql) from $2 on, and
-- {{order}} is DESC (newest first, the default) or ASC.
--
-- Plans at 10M rows (docs/console-queries.md): no status or done only, a
-- backward (or forward) walk of the primary key that stops after $1 matches;
-- dead, a walk of the dead index; pending and processing, their partial
-- indexes (few rows) then a top-N sort; an id range, a primary-key range.
SELECT id, aggregate_type, aggregate_id, event_type, status, attempts,
       created_at, available_at, done_at, lease_until, lease_owner, last_error
FROM {{rows}}
WHERE {{where}}
ORDER BY id {{order}}
LIMIT $1
