-- Notify: one notification on channel $1 with payload $2 (the listener's
-- start-up probe).
SELECT pg_notify($1, $2)
