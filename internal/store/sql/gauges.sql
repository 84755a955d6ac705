-- Gauges: the figures metrics poll every few seconds, so it must stay cheap
-- on a table of millions of done rows. $1 is the table's quoted name.
--
-- Pending, processing and dead are exact, each counted through a partial
-- index that holds only rows not done: pending through the ready index,
-- processing through the leased index (the same pass yields the expired
-- leases and, with pending, the oldest undelivered row), dead through the
-- dead index (or the aggregate-head index, whose predicate "status <> 'done'"
-- is repeated word for word so it matches a table migrated before the dead
-- index existed).
--
-- Done is as in status.sql: past 10,000 the planner's row count of the
-- table (pg_class.reltuples, as of its last ANALYZE or VACUUM) less the
-- exact counts, since counting done rows means reading them all, and the
-- last column says it is an estimate; otherwise (a small table, or one
-- never analysed, reltuples -1) the done rows are counted exactly through
-- the done index, a scan that stops at the 10,001st. The count is an
-- InitPlan, run only when the CASE reaches it.
WITH pending AS (
    SELECT count(*) AS n, min(created_at) AS oldest
    FROM {{table}}
    WHERE status = 'pending'
),
processing AS (
    SELECT count(*) AS n, min(created_at) AS oldest,
           count(*) FILTER (WHERE lease_until < now()) AS expired
    FROM {{table}}
    WHERE status = 'processing'
),
dead AS (
    SELECT count(*) AS n
    FROM {{table}}
    WHERE status <> 'done' AND status = 'dead'
),
estimate AS (
    SELECT c.reltuples::bigint AS n
    FROM pg_catalog.pg_class AS c
    WHERE c.oid = $1::text::regclass
),
done_capped AS (
    -- In the done index's order, so that its front is what is read, not
    -- the table (which done rows dominate).
    SELECT count(*) AS n FROM (SELECT 1 FROM {{table}} WHERE status = 'done'
                               ORDER BY done_at, id LIMIT 10001) AS x
),
done AS (
    SELECT CASE WHEN e.n - p.n - q.n - d.n > 10000 THEN e.n - p.n - q.n - d.n
                ELSE (SELECT n FROM done_capped) END AS n,
           e.n - p.n - q.n - d.n > 10000 OR (SELECT n FROM done_capped) > 10000 AS estimated
    FROM pending AS p, processing AS q, dead AS d, estimate AS e
)
SELECT p.n, q.n, d.n,
       coalesce((SELECT n FROM done), 0),
       coalesce(greatest(extract(epoch FROM now() - least(p.oldest, q.oldest))::float8, 0), 0),
       q.expired,
       coalesce((SELECT estimated FROM done), false)
FROM pending AS p, processing AS q, dead AS d
