-- Status under snapshot cursors, where the status column is not written:
-- pending is every committed row past its shard's cursor (not visible in
-- done, nor in the open window up to its last id) and every parked message
-- waiting; dead the parked dead ones. Counting the pending rows reads the
-- backlog through the cursor index, as status.sql reads it through the
-- ready index. $1 is the table's quoted name.
-- Columns: pending, dead, the oldest pending row's age in seconds (NULL:
-- none), the attempts histogram of pending messages (failed deliveries
-- so far + 1, as a claim would count them), the planner's row count of
-- the table, and its rows counted up to 10,001.
WITH {{cursor_past}},
waiting AS (
    SELECT p.attempts, o.created_at
    FROM {{parked}} AS p JOIN {{table}} AS o ON o.id = p.id
    WHERE p.status = 'pending'
)
SELECT (SELECT count(*) FROM past) + (SELECT count(*) FROM waiting),
       (SELECT count(*) FROM {{parked}} WHERE status = 'dead'),
       (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM (
            SELECT min(created_at) AS created_at FROM past
            UNION ALL
            SELECT min(created_at) FROM waiting) AS u),
       (SELECT coalesce(jsonb_object_agg(attempts, n), '{}'::jsonb) FROM (
            SELECT attempts, count(*) AS n FROM (
                SELECT 1 AS attempts FROM past
                UNION ALL
                SELECT attempts + 1 FROM waiting) AS u
            GROUP BY attempts) AS h),
       (SELECT c.reltuples::bigint FROM pg_catalog.pg_class AS c WHERE c.oid = $1::text::regclass),
       (SELECT count(*) FROM (SELECT 1 FROM {{table}} LIMIT 10001) AS t)
