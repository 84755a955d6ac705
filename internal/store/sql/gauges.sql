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
-- Done is an estimate: the planner's row count of the table
-- (pg_class.reltuples, as of its last ANALYZE or VACUUM) less the exact
-- counts, floored at 0, since counting done rows means reading them all. A
-- table never analysed has reltuples -1: done is then 0 until autovacuum
-- analyses it.
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
    SELECT greatest(c.reltuples, 0)::bigint AS n
    FROM pg_catalog.pg_class AS c
    WHERE c.oid = $1::text::regclass
)
SELECT p.n, q.n, d.n,
       greatest(coalesce((SELECT n FROM estimate), 0) - p.n - q.n - d.n, 0),
       coalesce(greatest(extract(epoch FROM now() - least(p.oldest, q.oldest))::float8, 0), 0),
       q.expired
FROM pending AS p, processing AS q, dead AS d
