-- AuditFinish: the write ended (completed, failed or cancelled); count was
-- kept current by each batch. $1 audit row.
UPDATE {{audit}} SET finished_at = now() WHERE id = $1
