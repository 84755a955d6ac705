-- Status: counts by status, the age of the oldest undelivered row, expired
-- leases and the attempts histogram of undelivered rows. Each part reads
-- only what it needs: the counts scan the table, the rest use partial indexes.
SELECT
    (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb)
       FROM (SELECT status, count(*) AS n FROM {{table}} GROUP BY status) AS c),
    (SELECT extract(epoch FROM now() - min(created_at))::float8 FROM (
        SELECT min(created_at) AS created_at FROM {{table}} WHERE status = 'pending'
        UNION ALL
        SELECT min(created_at) FROM {{table}} WHERE status = 'processing'
     ) AS u),
    (SELECT count(*) FROM {{table}} WHERE status = 'processing' AND lease_until < now()),
    (SELECT coalesce(jsonb_object_agg(attempts, n), '{}'::jsonb) FROM (
        SELECT attempts, count(*) AS n FROM {{table}}
        WHERE status IN ('pending', 'processing') GROUP BY attempts
     ) AS h)
