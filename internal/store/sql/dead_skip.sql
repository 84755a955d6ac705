-- DeadSkip: dead rows to done without delivery (an operator's decision; it
-- unblocks an ordered aggregate). last_error is kept as the record of why.
UPDATE {{table}}
SET status = 'done', done_at = now(), lease_owner = NULL, lease_until = NULL
WHERE status = 'dead' AND id = ANY($1::bigint[])
RETURNING id
