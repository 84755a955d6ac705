-- The origin of the snapshots a statement takes: the cluster (its system
-- identifier) and the timeline of the server, as text, '' on a server in
-- recovery. A snapshot names transaction ids, which mean the same only on
-- the same origin: a standby promoted after an asynchronous failover hands
-- out again the ids of the transactions it never received, and a snapshot
-- the old primary took counts them as ended (visible if committed). A
-- snapshot a dispatcher holds in memory is written or read against only
-- on the origin it was taken on ({{cursor_origin}}).
(SELECT CASE WHEN pg_is_in_recovery() THEN ''
             ELSE (SELECT system_identifier FROM pg_control_system())::text || '/' ||
                  substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END)
