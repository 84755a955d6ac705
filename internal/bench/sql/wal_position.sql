-- Where the WAL is being written now; two readings, subtracted, are the
-- bytes of WAL written between them, by every session of the server.
SELECT pg_current_wal_insert_lsn()::text
