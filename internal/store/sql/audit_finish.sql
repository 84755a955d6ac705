-- AuditFinish: the write ended (completed, failed or cancelled). $1 audit
-- row; $2 its count, or NULL when the batches kept it current.
UPDATE {{audit}} SET finished_at = now(), count = coalesce($2, count) WHERE id = $1
