-- The table as the console reads it under snapshot cursors, where the
-- status column is not written: each row with its status derived as
-- cursor_status.sql counts it (parked pending or dead; else done once its
-- shard's cursor passed it: visible in the done snapshot, or in the open
-- window up to its last id; else pending; a row finished before the
-- cursors were enabled, its xid NULL, keeps its status column), its
-- attempts, due time and error from its parked row, and its shard. Used in place of the
-- table in the console's statements; the planner inlines it, so a page
-- still walks the primary key and probes the parked table by id.
(SELECT o.id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload, o.headers, o.uid,
        o.created_at, o.lease_version, o.shard,
        CASE WHEN p.status IS NOT NULL THEN p.status
             WHEN o.xid IS NULL THEN o.status
             WHEN pg_visible_in_snapshot(o.xid, h.done)
                  OR h.win IS NOT NULL AND pg_visible_in_snapshot(o.xid, h.win) AND o.id <= h.win_last THEN 'done'
             ELSE 'pending' END AS status,
        coalesce(p.attempts, CASE WHEN o.xid IS NULL THEN o.attempts ELSE 0 END) AS attempts,
        coalesce(p.available_at, o.available_at) AS available_at,
        CASE WHEN o.xid IS NULL THEN o.done_at END AS done_at,
        NULL::timestamptz AS lease_until, NULL::text AS lease_owner,
        coalesce(p.last_error, CASE WHEN o.xid IS NULL THEN o.last_error END) AS last_error
 FROM {{table}} AS o
 LEFT JOIN {{shards}} AS h ON h.shard = o.shard
 LEFT JOIN {{parked}} AS p ON p.id = o.id) AS messages
