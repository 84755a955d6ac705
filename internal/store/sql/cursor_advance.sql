-- Advance the cursors of shards whose batches were settled, and write the
-- batches' exceptions, in one statement. Each shard row is updated only
-- under the owner and token given: a takeover is an update of the same
-- row, so the two serialize on its lock. One that committed first changed
-- the token; the re-check then excludes the shard, and nothing of it is
-- written (0 rows: the shard was lost). One that comes after reads the
-- advanced cursor. Writing the same values again changes nothing, so a
-- retry after a lost reply is safe.
--
-- Per shard: close ($4) sets done to the window's snapshot ($5) and clears
-- the window; otherwise the window stays open at (hi, last id delivered
-- $6) after the window's lower bound ($14: several batches written at
-- once may close a window and read into the next one, whose lower bound
-- is then the closed one's hi). A NULL hi moves nothing (a batch of
-- parked messages only).
-- Per message: 'done' deletes its parked row (if any); 'pending' or 'dead'
-- parks it (or updates its parked row): its total failed deliveries, when
-- it is due, and its error ('' keeps the previous one).
-- A shard is written only on the origin its batches were read on ($15, see
-- cursor_origin.sql): after a failover, a snapshot taken before it may
-- count as ended the transactions the new primary hands out again, and
-- an id read before it may name another message. Such a shard is left
-- out as if lost, and its owner loads it again from what is stored.
-- $1 owner, $2 shards, $3 tokens, $4 closes, $5 his, $6 last ids;
-- $7 ids, $8 their shards, $9 aggregates, $10 statuses, $11 delays in
-- microseconds, $12 attempts, $13 errors; $14 the open windows' lower
-- bounds (NULL: the stored done); $15 the origins.
WITH adv AS (
    UPDATE {{shards}} AS h
    SET done = CASE WHEN f.hi IS NULL THEN h.done
                    WHEN f.close THEN f.hi::pg_snapshot
                    ELSE coalesce(f.done::pg_snapshot, h.done) END,
        win = CASE WHEN f.hi IS NULL THEN h.win WHEN f.close THEN NULL ELSE f.hi::pg_snapshot END,
        win_last = CASE WHEN f.hi IS NULL THEN h.win_last WHEN f.close THEN NULL ELSE f.last END
    FROM unnest($2::integer[], $3::bigint[], $4::boolean[], $5::text[], $6::bigint[], $14::text[], $15::text[])
         AS f(shard, token, close, hi, last, done, origin)
    WHERE h.shard = f.shard AND h.token = f.token AND h.owner = $1 AND f.origin = {{cursor_origin}}
    RETURNING h.shard
),
w AS (
    SELECT w.* FROM unnest($7::bigint[], $8::integer[], $9::text[], $10::text[], $11::bigint[], $12::integer[], $13::text[])
                    AS w(id, shard, aggregate_id, status, delay_us, attempts, last_error)
    WHERE w.shard IN (SELECT shard FROM adv)
),
parked AS (
    INSERT INTO {{parked}} AS p (id, shard, aggregate_id, status, attempts, available_at, last_error)
    SELECT w.id, w.shard, w.aggregate_id, w.status, w.attempts,
           now() + w.delay_us * interval '1 microsecond', nullif(w.last_error, '')
    FROM w WHERE w.status <> 'done'
    ON CONFLICT (id) DO UPDATE
    SET status = excluded.status, attempts = excluded.attempts, available_at = excluded.available_at,
        last_error = coalesce(excluded.last_error, p.last_error)
),
cleared AS (
    DELETE FROM {{parked}} AS p USING w WHERE p.id = w.id AND w.status = 'done'
)
SELECT shard FROM adv
