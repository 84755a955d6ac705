-- CheckPath: parse $1 as an SQL/JSON path, so a bad one is reported before
-- any statement that uses it runs.
SELECT $1::text::jsonpath IS NOT NULL
