-- Snapshot cursors on a table with shards (docs/snapshot-cursors.md): each
-- row records the transaction that inserted it (xid, a column default:
-- producers never set it), read through the index (shard, xid, id); each
-- shard row holds, beside its lease, the snapshot up to which the shard is
-- delivered (done) and, while a window is open, the window's snapshot
-- (win) and the last id delivered in it (win_last); the parked table holds
-- the exceptions, the only messages written after their insert. Run in one
-- transaction under the migration lock, after shard_enable.sql.
--
-- A column added with a volatile default would rewrite the table: the
-- column is added bare and the default set after, so rows from before keep
-- NULL (they are not in the cursor index) except the unfinished ones, which
-- get this transaction's id: visible in no stored snapshot (done starts
-- empty), they are delivered by the cursor once this commits.
ALTER TABLE {{table}} ADD COLUMN IF NOT EXISTS xid xid8;
ALTER TABLE {{table}} ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
UPDATE {{table}} SET xid = pg_current_xact_id()
WHERE xid IS NULL AND status IN ('pending', 'processing');
CREATE INDEX IF NOT EXISTS {{cursor_index}} ON {{table}} (shard, xid, id) WHERE xid IS NOT NULL;
-- '3:3:' is the empty snapshot: every normal transaction id is at or past
-- its xmax, so nothing is visible in it.
ALTER TABLE {{shards}} ADD COLUMN IF NOT EXISTS done pg_snapshot NOT NULL DEFAULT '3:3:';
ALTER TABLE {{shards}} ADD COLUMN IF NOT EXISTS win pg_snapshot;
ALTER TABLE {{shards}} ADD COLUMN IF NOT EXISTS win_last bigint;
CREATE TABLE IF NOT EXISTS {{parked}} (
    id           bigint PRIMARY KEY,
    shard        integer NOT NULL,
    aggregate_id text NOT NULL,
    -- 'pending': waiting for its retry (or, ordered, behind an earlier
    -- parked message of its aggregate); 'dead'.
    status       text NOT NULL CHECK (status IN ('pending', 'dead')),
    -- Deliveries that failed so far (a defer and a message held back
    -- behind another count none).
    attempts     integer NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    parked_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS {{parked_shard_index}} ON {{parked}} (shard, id);
CREATE INDEX IF NOT EXISTS {{parked_aggregate_index}} ON {{parked}} (aggregate_id, id);
-- The dead rows from before move to the parked table, where the dead
-- messages of a cursor table are listed, retried and skipped; their status
-- column reads done, what they are once retried and delivered, or skipped
-- (and get their shard on the way: rows dead before shards were enabled
-- have none).
WITH moved AS (
    UPDATE {{table}}
    SET status = 'done',
        shard = coalesce(shard, ((hashtextextended(aggregate_id, 0) & 2147483647)
                                 % (SELECT count(*) FROM {{shards}}))::integer)
    WHERE status = 'dead' AND xid IS NULL
    RETURNING id, shard, aggregate_id, attempts, available_at, last_error
)
INSERT INTO {{parked}} (id, shard, aggregate_id, status, attempts, available_at, last_error)
SELECT id, shard, aggregate_id, 'dead', attempts, available_at, last_error FROM moved
ON CONFLICT (id) DO NOTHING;
