-- DeadSkip under snapshot cursors: parked dead messages are given up
-- without delivery (an operator's decision; it unblocks an ordered
-- aggregate): the parked row goes, and with it the message is done (its
-- shard's cursor is past it).
DELETE FROM {{parked}}
WHERE status = 'dead' AND id = ANY($1::bigint[])
RETURNING id
