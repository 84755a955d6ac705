-- CountWindow: the matches among the newest $1 rows of the driving set, for
-- a filter with terms no index serves; {{driving}} and {{residual}} as in
-- console_search.sql, from $2 on. Returns the matches and the rows read:
-- fewer rows than $1 means the window held every row of the driving set
-- and the count is exact. Plan: the same bounded walk as the search, then
-- an aggregate over at most $1 rows.
SELECT count(*) FILTER (WHERE ({{residual}}) IS TRUE), count(*)
FROM (
    SELECT id, aggregate_type, aggregate_id, event_type, created_at, last_error, payload, headers
    FROM {{rows}}
    WHERE {{driving}}
    ORDER BY id DESC
    LIMIT $1
) AS win
