-- PurgeIndex: whether the done index the purge reads is in place and valid
-- (migration 004). $1 its quoted name, schema-qualified when the table is.
-- Without it each purge batch would read and sort every done row.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index AS i
               WHERE i.indexrelid = to_regclass($1) AND i.indisvalid)
