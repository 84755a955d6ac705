-- NonEmptyViolations: the rows the check constraint of migration 008 would
-- refuse, counted before it is validated (a sequential scan, run only while
-- the constraint is not valid), and the first few ids.
SELECT count(*), coalesce((array_agg(id ORDER BY id))[1:5], '{}')
FROM {{table}}
WHERE aggregate_type = '' OR aggregate_id = '' OR event_type = ''
