-- MigrateXactLock: wait for the lock of MigrateTryXactLock.
SELECT pg_advisory_xact_lock($1)
