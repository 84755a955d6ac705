-- Search: one page of summaries from a bounded window of the table, for a
-- filter with terms no index serves. $1 is the page size, $2 the window:
-- how many rows of the driving set (the rows {{driving}} selects, in id
-- order from the cursor) are read at most. {{driving}} holds the terms an
-- index serves (status, ids, id range, the cursor, a column that leads an
-- index of its own) from $3 on; {{residual}} the other terms, numbered after
-- them, evaluated on each row of the window. {{order}} is DESC or ASC.
--
-- Every row that matches comes back (hit), and so does the window's last
-- row (n = $2) whether or not it matches: it is where the next call goes on
-- when the page is not full. The outer LIMIT stops the walk once the page
-- is full, so a common match reads few rows and a rare one reads at most
-- $2: the cost of a call does not grow with the table.
--
-- Plan: the inner query walks the primary key (or the dead index, or the
-- index of a driving column) from the cursor and stops at $2 rows; the
-- window function and both ORDER BYs take the walk's order (no sort).
SELECT id, aggregate_type, aggregate_id, event_type, status, attempts,
       created_at, available_at, done_at, lease_until, lease_owner, last_error,
       hit, n
FROM (
    SELECT id, aggregate_type, aggregate_id, event_type, status, attempts,
           created_at, available_at, done_at, lease_until, lease_owner, last_error,
           ({{residual}}) IS TRUE AS hit,
           row_number() OVER (ORDER BY id {{order}}) AS n
    FROM (
        SELECT id, aggregate_type, aggregate_id, event_type, status, attempts,
               created_at, available_at, done_at, lease_until, lease_owner, last_error,
               payload, headers
        FROM {{rows}}
        WHERE {{driving}}
        ORDER BY id {{order}}
        LIMIT $2
    ) AS win
) AS scanned
WHERE hit OR n = $2
ORDER BY id {{order}}
LIMIT $1
