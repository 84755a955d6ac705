package cli

import (
	"fmt"

	"github.com/outboxd/outbox"
)

// poolerFix is what to change when a transaction pooler (PgBouncer in
// transaction mode) sits between outboxd and the server.
const poolerFix = "a transaction pooler (PgBouncer in transaction mode) between outboxd and the server hands each " +
	"statement to another server session, so pgx's prepared statements collide or vanish: add " +
	"default_query_exec_mode=exec to the DSN, and run with --no-notify (LISTEN needs a session of its own)"

// poolerHint adds poolerFix to an error whose SQLSTATE says a prepared
// statement already exists (42P05) or does not exist (26000), the first
// failure through such a pooler; other errors pass unchanged.
func poolerHint(err error) error {
	if outbox.IsPoolerError(err) {
		return fmt.Errorf("%w; %s", err, poolerFix)
	}
	return err
}
