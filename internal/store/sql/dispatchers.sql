-- Dispatchers: the owners holding leases, from the processing rows alone
-- (the leased index). The latest lease expiry is the freshest sign of life:
-- every claim and heartbeat moves it to now() + lease.
SELECT lease_owner, count(*), max(lease_until),
       count(*) FILTER (WHERE lease_until < now())
FROM {{table}}
WHERE status = 'processing' AND lease_owner IS NOT NULL
GROUP BY lease_owner
ORDER BY lease_owner
