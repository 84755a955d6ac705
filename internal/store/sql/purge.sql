-- Purge: delete one bounded batch of done rows finished before now() - $1 µs,
-- walking the primary key from id $2. Returns the deleted ids' maximum and count.
WITH victims AS (
    SELECT id FROM {{table}}
    WHERE id > $2 AND status = 'done' AND done_at < now() - $1 * interval '1 microsecond'
    ORDER BY id
    LIMIT $3
),
deleted AS (
    DELETE FROM {{table}} AS o USING victims WHERE o.id = victims.id RETURNING o.id
)
SELECT coalesce(max(id), 0), count(*) FROM deleted
