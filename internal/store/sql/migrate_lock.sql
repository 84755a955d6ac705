-- MigrateLock: wait for the session advisory lock of MigrateTryLock.
SELECT pg_advisory_lock($1)
