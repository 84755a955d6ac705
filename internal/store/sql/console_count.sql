-- Count: matching rows, counting stops at $1. The inner query walks the
-- same path as the newest-first listing (console_messages.sql), so a capped
-- count reads at most $1 matches: the primary key backwards, or the
-- partial index of the status asked for.
SELECT count(*) FROM (
    SELECT 1 FROM {{rows}}
    WHERE {{where}}
    ORDER BY id DESC
    LIMIT $1
) AS matching
