package outbox

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// PoolerFix says what to change when a transaction pooler (PgBouncer in
// transaction mode) sits between the relay and the server: each statement
// may run on another server session, so the statements pgx prepares
// collide or vanish, and LISTEN has no session to stay on.
const PoolerFix = "a transaction pooler (PgBouncer in transaction mode) hands each statement to another server session, " +
	"so prepared statements collide or vanish: add default_query_exec_mode=exec to the DSN and turn LISTEN off"

// IsPoolerError reports whether err is, or wraps, the failure a transaction
// pooler provokes: a prepared statement that already exists (SQLSTATE
// 42P05) or does not exist (26000) on the session the statement reached.
func IsPoolerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000")
}
