-- When the planner's row count of the table (reltuples, which an estimated
-- done count is read from) was last set: its latest ANALYZE or VACUUM,
-- manual or automatic; NULL when never.
SELECT greatest(last_analyze, last_autoanalyze, last_vacuum, last_autovacuum)
FROM pg_catalog.pg_stat_all_tables
WHERE relid = to_regclass($1)
