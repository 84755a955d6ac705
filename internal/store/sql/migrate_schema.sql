-- MigrateSchema: the schema an unqualified table name lives in, or would be
-- created in: where the table is if it exists, else the first schema of the
-- search_path that exists (NULL when none does). $1 the quoted name.
SELECT coalesce(
    (SELECT n.nspname
     FROM pg_catalog.pg_class AS c
     JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
     WHERE c.oid = to_regclass($1)),
    current_schema())
