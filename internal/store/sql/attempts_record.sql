-- Record a batch of attempts in the history, each message keeping its
-- newest $9 entries: the new one, and the newest $9 - 1 of those it had
-- (the entries at that offset and older go, in the same statement). One
-- entry per message per statement; the writes they follow are settled.
-- $1 message ids, $2 when each publish ended (the database's clock, as the
-- dispatcher tracks it), $3 dispatchers, $4 attempt numbers, $5 durations
-- in microseconds, $6 outcomes (retry, defer, dead), $7 the receivers'
-- status codes (0: none), $8 errors, $9 entries kept per message (>= 1).
WITH r AS (
    SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::integer[], $5::bigint[], $6::text[],
                         $7::integer[], $8::text[])
        AS r(id, at, dispatcher, attempt, duration_us, outcome, status, error)
),
trimmed AS (
    DELETE FROM {{attempts}} AS a
    USING r
    WHERE a.message_id = r.id
      AND a.at <= (SELECT b.at FROM {{attempts}} AS b WHERE b.message_id = r.id
                   ORDER BY b.at DESC OFFSET $9::integer - 1 LIMIT 1)
)
INSERT INTO {{attempts}} (message_id, at, dispatcher, attempt, duration_us, outcome, status, error)
SELECT id, at, dispatcher, attempt, duration_us, outcome, nullif(status, 0), nullif(error, '') FROM r
