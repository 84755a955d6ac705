-- MigrateTryXactLock: MigrateTryLock held by a transaction instead of the
-- session, for a connection that only holds the lock while another does the
-- work: it needs no session state, so it works through a transaction pooler.
SELECT pg_try_advisory_xact_lock($1)
