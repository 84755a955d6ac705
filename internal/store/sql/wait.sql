-- Wait: record that this owner is idle and listening until now() + $2 µs.
INSERT INTO {{waiters}} (owner, wait_until)
VALUES ($1, now() + $2 * interval '1 microsecond')
ON CONFLICT (owner) DO UPDATE SET wait_until = EXCLUDED.wait_until
