package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxd/outbox/internal/store"
)

// MinServerVersion is the oldest PostgreSQL the migrations and statements
// run on, as server_version_num: 11, for CREATE TRIGGER ... EXECUTE
// FUNCTION (identity columns need 10, SKIP LOCKED and ON CONFLICT 9.5).
const MinServerVersion = 110000

// AccessOpts says what a dispatcher will do, which decides the privileges
// it needs. A nil *AccessOpts means the defaults of `outboxd run`.
type AccessOpts struct {
	// NoNotify is set when the dispatcher polls only (--no-notify): it then
	// never touches the waiters table nor LISTENs.
	NoNotify bool
	// Retention is set when it purges done rows (--retention), which needs
	// DELETE on the table.
	Retention bool
}

// Privileges returns the table privileges a dispatcher needs on the outbox
// table and on its waiters table. Claims lock rows FOR UPDATE and write
// them (SELECT, UPDATE); an idle dispatcher upserts and deletes its waiter
// row (INSERT ... ON CONFLICT DO UPDATE reads and updates it).
func (o *AccessOpts) Privileges() (table, waiters []string) {
	if o == nil {
		o = &AccessOpts{}
	}
	table = []string{"SELECT", "UPDATE"}
	if o.Retention {
		table = append(table, "DELETE")
	}
	if !o.NoNotify {
		waiters = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	}
	return table, waiters
}

// Access is what [Admin.CheckAccess] found: the server, the table's
// migration state and what the connected role may do.
type Access struct {
	// Role is the connected role (current_user).
	Role string
	// ServerVersion is server_version_num, e.g. 150020 for 15.20.
	ServerVersion int
	// TableExists is whether the table exists; Missing lists the parts of
	// the migrations that are absent from an existing table ("headers
	// column", "waiters table", "wake-up trigger", an index or the audit
	// table by name): run migrate.
	TableExists bool
	Missing     []string
	// SchemaUsage is whether the role may use the table's schema.
	SchemaUsage bool
	// MissingTable and MissingWaiters are the privileges the dispatcher
	// needs and the role lacks, on the table and on its waiters table.
	MissingTable, MissingWaiters []string
	// ListenErr is the error of a trial LISTEN (rolled back), nil when it
	// worked or was not tried (NoNotify, or no table).
	ListenErr error
}

// CheckAccess reads, from the catalogs, whether the table exists with every
// migration applied and whether the connected role holds what a dispatcher
// configured as opts needs, and tries a LISTEN on the wake-up channel
// inside a transaction it rolls back. It changes nothing.
func (a *Admin) CheckAccess(ctx context.Context, opts *AccessOpts) (*Access, error) {
	tablePrivs, waiterPrivs := opts.Privileges()
	sa, err := a.store.Access(ctx, a.db, tablePrivs, waiterPrivs)
	if err != nil {
		return nil, fmt.Errorf("outbox: reading the catalogs: %w", err)
	}
	out := &Access{Role: sa.Role, ServerVersion: sa.ServerVersion, TableExists: sa.TableExists,
		SchemaUsage: sa.SchemaUsage, MissingTable: sa.MissingTable, MissingWaiters: sa.MissingWaiters}
	if !sa.TableExists {
		return out, nil
	}
	for _, p := range []struct {
		name string
		ok   bool
	}{{"headers column", sa.HeadersColumn}, {"waiters table", sa.WaitersExists}, {"wake-up trigger", sa.WakeTrigger}} {
		if !p.ok {
			out.Missing = append(out.Missing, p.name)
		}
	}
	for _, r := range sa.MissingRelations {
		if !strings.HasSuffix(r, "_waiters") { // reported above
			out.Missing = append(out.Missing, r)
		}
	}
	if (opts != nil && opts.NoNotify) || !sa.SchemaUsage {
		return out, nil
	}
	schema, name, err := a.store.Resolve(ctx, a.db)
	if err != nil && !errors.Is(err, store.ErrTableOutdated) {
		out.ListenErr = err
		return out, nil
	}
	if err == nil {
		out.ListenErr = a.store.CheckListen(ctx, a.db, schema+"."+name)
	}
	return out, nil
}
