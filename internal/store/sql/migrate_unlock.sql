-- MigrateUnlock: release the lock of MigrateLock.
SELECT pg_advisory_unlock($1)
