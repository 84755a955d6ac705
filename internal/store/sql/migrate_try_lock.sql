-- MigrateTryLock: take the session advisory lock that serialises migrations
-- of one table ($1 its key) if it is free; reports whether it was.
SELECT pg_try_advisory_lock($1)
