-- MigrateLockTimeout: bound, for the current transaction, each wait of a
-- migration step for a table lock ($1 as text: '2000ms'), so producers
-- never queue for long behind a DDL statement that waits itself.
SELECT set_config('lock_timeout', $1, true)
