-- DeadList under snapshot cursors: the parked dead messages, oldest first,
-- after id $1, at most $2; attempts and last error are the parked row's,
-- the lease version its shard's token.
SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text, o.created_at,
       p.attempts, h.token, coalesce(p.last_error, ''), coalesce(o.uid::text, '')
FROM {{parked}} AS p
JOIN {{table}} AS o ON o.id = p.id
JOIN {{shards}} AS h ON h.shard = p.shard
WHERE p.status = 'dead' AND p.id > $1
ORDER BY p.id
LIMIT $2
