-- Reference claim: the design article's original claim, which `outboxd
-- bench --variant seed` measures the batched design against. Note
-- the single OR predicate ordered by id: it is planned as a primary-key walk
-- that reads every finished row before the first pending one.
-- $1 owner, $2 batch, $3 lease (µs), $4 max attempts.
WITH picked AS (
    SELECT id FROM {{table}}
    WHERE (status = 'pending' AND available_at <= now())
       OR (status = 'processing' AND lease_until < now() AND attempts < $4)
    ORDER BY id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE {{table}} AS o
SET status = 'processing', lease_owner = $1, lease_until = now() + $3 * interval '1 microsecond',
    lease_version = o.lease_version + 1, attempts = o.attempts + 1
FROM picked
WHERE o.id = picked.id
RETURNING o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text,
          o.created_at, o.attempts, o.lease_version, now()
