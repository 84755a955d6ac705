-- Access: what `outboxd config check --connect` reports about the table and
-- the connected role, and what a dispatcher checks before it starts, read
-- from the catalogs only (no row is touched).
-- $1 the table's quoted name, $2 the waiters table's, $3 the wake trigger's
-- bare name, $4 the privileges needed on the table, $5 those needed on the
-- waiters table, $6 the schema as written ('' for none), $7 the name, $8
-- the relations the migrations create beside the table (indexes, the
-- waiters, audit and attempts tables), by bare name, looked for in the
-- table's schema; $9 and $10 the companion tables and the privileges
-- needed on them (below).
-- Privilege tests run only on relations that exist (CASE evaluates
-- lazily), since has_table_privilege fails on a missing one. A qualified
-- name is looked up in the catalogs rather than by to_regclass, which
-- fails outright on a schema the role may not use: that is a finding to
-- report, not an error. SELECT, INSERT and UPDATE count as held when
-- granted on some column (has_any_column_privilege, which a table-wide
-- grant also satisfies): a role granted UPDATE on just the columns the
-- dispatcher writes is not refused; DELETE exists only table-wide.
WITH t AS (
    SELECT CASE WHEN $6 = '' THEN to_regclass($1)::oid ELSE (
        SELECT c.oid FROM pg_catalog.pg_class AS c
        JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = $6 AND c.relname = $7) END AS oid
),
w AS (
    SELECT CASE WHEN $6 = '' THEN to_regclass($2)::oid ELSE (
        SELECT c.oid FROM pg_catalog.pg_class AS c
        JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
        WHERE n.nspname = $6 AND c.relname = $7 || '_waiters') END AS oid
),
-- The companion tables (attempts, dispatchers: $9 their suffixes, $10 the
-- privileges needed on each, comma-separated), in the table's schema.
c AS (
    SELECT p.ord, p.privs,
           (SELECT r.oid FROM pg_catalog.pg_class AS r
            WHERE r.relname = $7 || p.suffix
              AND r.relnamespace = (SELECT o.relnamespace FROM pg_catalog.pg_class AS o WHERE o.oid = t.oid)) AS oid
    FROM t, unnest($9::text[], $10::text[]) WITH ORDINALITY AS p(suffix, privs, ord)
)
SELECT current_user::text,
       current_setting('server_version_num')::int,
       coalesce((SELECT n.nspname::text FROM pg_catalog.pg_class AS c
                 JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
                 WHERE c.oid = t.oid), ''),
       t.oid IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = t.oid AND a.attname = 'headers' AND NOT a.attisdropped),
       w.oid IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_catalog.pg_trigger AS g
               WHERE g.tgrelid = t.oid AND g.tgname = $3 AND NOT g.tgisinternal),
       ARRAY(SELECT r FROM unnest($8::text[]) AS r
             WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
                               WHERE c.relname = r
                                 AND c.relnamespace = (SELECT o.relnamespace FROM pg_catalog.pg_class AS o
                                                       WHERE o.oid = t.oid))),
       CASE WHEN t.oid IS NOT NULL THEN
           has_schema_privilege((SELECT c.relnamespace FROM pg_catalog.pg_class AS c WHERE c.oid = t.oid), 'USAGE')
       END,
       CASE WHEN t.oid IS NOT NULL THEN
           ARRAY(SELECT p FROM unnest($4::text[]) AS p
                 WHERE NOT CASE WHEN p = 'DELETE' THEN has_table_privilege(t.oid, p)
                                ELSE has_any_column_privilege(t.oid, p) END)
       END,
       CASE WHEN w.oid IS NOT NULL THEN
           ARRAY(SELECT p FROM unnest($5::text[]) AS p
                 WHERE NOT CASE WHEN p = 'DELETE' THEN has_table_privilege(w.oid, p)
                                ELSE has_any_column_privilege(w.oid, p) END)
       END,
       -- Per companion, the privileges missing, comma-separated ('' when
       -- none, or when the table is absent: reported as missing above).
       ARRAY(SELECT coalesce(CASE WHEN c.oid IS NOT NULL THEN
                 (SELECT string_agg(p, ',' ORDER BY n) FROM unnest(string_to_array(c.privs, ',')) WITH ORDINALITY AS x(p, n)
                  WHERE NOT CASE WHEN p = 'DELETE' THEN has_table_privilege(c.oid, p)
                                 ELSE has_any_column_privilege(c.oid, p) END) END, '')
             FROM c ORDER BY c.ord)
FROM t, w
