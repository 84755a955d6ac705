-- The origin of the snapshots a statement takes: the server's timeline,
-- as text, '' on a server in recovery. A snapshot names transaction ids,
-- which mean the same only on the timeline it was taken on: a standby
-- promoted after an asynchronous failover (a new timeline) hands out again
-- the ids of the transactions it never received, and a snapshot the old
-- primary took counts them as ended (visible if committed). A snapshot a
-- dispatcher holds in memory is written or read against only on the
-- origin it was taken on ({{cursor_origin}}). The timeline is read from the
-- name of the current WAL file (no file is read).
(SELECT CASE WHEN pg_is_in_recovery() THEN ''
             ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END)
