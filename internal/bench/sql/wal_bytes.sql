-- The bytes of WAL between two positions read with wal_position.sql.
SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::bigint
