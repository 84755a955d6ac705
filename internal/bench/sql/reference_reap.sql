-- Reference reap: the article's reaper, run before the reference claim in
-- one transaction.
UPDATE {{table}}
SET status = 'dead', last_error = 'lease expired after max attempts (worker crash?)',
    lease_owner = NULL, lease_until = NULL
WHERE status = 'processing' AND lease_until < now() AND attempts >= $1
