-- Purge under snapshot cursors: one bounded batch of the table in id order
-- after $2, deleting the rows created before now() - $1 µs that are
-- delivered: visible in their shard's done snapshot and not parked (a row
-- from before the cursors, xid NULL, when its status is done). Rows not yet
-- delivered, parked, or young are kept for a later pass. $3 the batch.
-- Returns how many rows it read and deleted, the last id it read (the
-- cursor of the next batch), and whether it read a row too young: ids
-- follow creation closely, so the pass stops there rather than read the
-- whole retention window.
WITH scanned AS (
    SELECT o.id, o.created_at, o.status, o.xid, o.shard FROM {{table}} AS o
    WHERE o.id > $2
    ORDER BY o.id
    LIMIT $3
),
victims AS (
    SELECT sc.id
    FROM scanned AS sc
    LEFT JOIN {{shards}} AS h ON h.shard = sc.shard
    WHERE sc.created_at < now() - $1 * interval '1 microsecond'
      AND CASE WHEN sc.xid IS NULL THEN sc.status = 'done'
               ELSE pg_visible_in_snapshot(sc.xid, h.done)
                    AND NOT EXISTS (SELECT 1 FROM {{parked}} AS p WHERE p.id = sc.id) END
),
deleted AS (
    DELETE FROM {{table}} AS o WHERE o.id = ANY (ARRAY(SELECT id FROM victims))
    RETURNING o.id
),
-- Their attempt histories go with them.
history AS (
    DELETE FROM {{attempts}} AS a WHERE a.message_id = ANY (ARRAY(SELECT id FROM deleted))
)
SELECT (SELECT count(*) FROM scanned), (SELECT count(*) FROM deleted),
       coalesce((SELECT max(id) FROM scanned), $2),
       EXISTS (SELECT 1 FROM scanned WHERE created_at >= now() - $1 * interval '1 microsecond')
