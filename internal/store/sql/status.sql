-- Status: counts by status, the age of the oldest undelivered row, expired
-- leases and the attempts histogram of undelivered rows. $1 is the table's
-- quoted name. No part reads the done rows of a large table, so it answers at
-- the speed of the undelivered rows at any table size:
--
-- pending, processing and dead are exact, each counted through its partial
-- index (ready, leased, dead; see gauges.sql). Done comes from the planner's
-- row count (pg_class.reltuples, as of the last ANALYZE or VACUUM) less the
-- other counts: when that is over 10,000 it is the answer and the fifth column
-- says it is an estimate. Otherwise (a small table, or one never analysed,
-- reltuples -1) the done rows are counted exactly up to 10,000, a scan that
-- stops at the 10,001st; past that the answer is 10,001, estimated. The
-- counting subquery is an InitPlan, run only when the CASE reaches it.
-- The attempts histogram reads pending and processing rows apart, each
-- through its own partial index: "status IN (pending, processing)" drew the
-- planner to the aggregate-head index, whose rows include the dead ones,
-- and so to a heap page per dead row.
WITH pending AS (
    SELECT count(*) AS n FROM {{table}} WHERE status = 'pending'
),
processing AS (
    SELECT count(*) AS n FROM {{table}} WHERE status = 'processing'
),
dead AS (
    SELECT count(*) AS n FROM {{table}} WHERE status <> 'done' AND status = 'dead'
),
done_capped AS (
    SELECT count(*) AS n FROM (SELECT 1 FROM {{table}} WHERE status = 'done' LIMIT 10001) AS d
),
estimate AS (
    SELECT c.reltuples::bigint AS n
    FROM pg_catalog.pg_class AS c
    WHERE c.oid = $1::text::regclass
)
SELECT
    jsonb_build_object('pending', p.n, 'processing', q.n, 'dead', d.n,
        'done', CASE WHEN e.n - p.n - q.n - d.n > 10000 THEN e.n - p.n - q.n - d.n
                     ELSE least((SELECT n FROM done_capped), 10001) END),
    (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM (
        SELECT min(created_at) AS created_at FROM {{table}} WHERE status = 'pending'
        UNION ALL
        SELECT min(created_at) FROM {{table}} WHERE status = 'processing'
     ) AS u),
    (SELECT count(*) FROM {{table}} WHERE status = 'processing' AND lease_until < now()),
    (SELECT coalesce(jsonb_object_agg(attempts, n), '{}'::jsonb) FROM (
        SELECT attempts, count(*) AS n FROM (
            SELECT attempts FROM {{table}} WHERE status = 'pending'
            UNION ALL
            SELECT attempts FROM {{table}} WHERE status = 'processing'
        ) AS u GROUP BY attempts
     ) AS h),
    e.n - p.n - q.n - d.n > 10000 OR (SELECT n FROM done_capped) > 10000
FROM pending AS p, processing AS q, dead AS d, estimate AS e
