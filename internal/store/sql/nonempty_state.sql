-- NonEmptyState: whether the table's check constraint refusing empty names
-- (migration 008) exists and is not yet validated. $1 the table's quoted
-- name, $2 the constraint's bare name.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint AS c
               WHERE c.conrelid = $1::regclass AND c.conname = $2 AND NOT c.convalidated)
