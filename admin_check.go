package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outbox/internal/store"
)

// MinServerVersion is the oldest PostgreSQL supported, as
// server_version_num: 15, the oldest release the PostgreSQL project still
// supports (the statements need 13, for gen_random_uuid()). Migrate and
// config check --connect refuse an older server.
const MinServerVersion = store.MinServerVersion

// AccessOpts says what a dispatcher will do, which decides the privileges
// it needs. A nil *AccessOpts means the defaults of `outboxd run`.
type AccessOpts struct {
	// NoNotify is set when the dispatcher polls only (--no-notify): it then
	// never LISTENs nor registers in the waiters table (each claim still
	// clears its own waiter row).
	NoNotify bool
	// Retention is set when it purges done rows (--retention), which needs
	// DELETE on the table and on its attempts table.
	Retention bool
	// NoHistory is set when it records no attempt history
	// (Config.AttemptHistory = NoAttemptHistory).
	NoHistory bool
}

// Privileges returns the table privileges a dispatcher needs on the outbox
// table and on its waiters table. Claims lock rows FOR UPDATE and write
// them (SELECT, UPDATE), and every claim deletes the claimer's waiter row
// (SELECT, DELETE: PostgreSQL checks a statement's privileges whether or not
// it deletes anything); an idle listening dispatcher upserts its waiter row
// (INSERT ... ON CONFLICT DO UPDATE reads and updates it).
func (o *AccessOpts) Privileges() (table, waiters []string) {
	if o == nil {
		o = &AccessOpts{}
	}
	table = []string{"SELECT", "UPDATE"}
	if o.Retention {
		table = append(table, "DELETE")
	}
	waiters = []string{"SELECT", "DELETE"}
	if !o.NoNotify {
		waiters = []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
	}
	return table, waiters
}

// AttemptPrivileges returns the privileges a dispatcher needs on the
// attempts table: recording an attempt inserts it and deletes the entries
// past the newest kept (SELECT, INSERT, DELETE); the retention purge
// deletes the history of the messages it deletes (SELECT, DELETE).
func (o *AccessOpts) AttemptPrivileges() []string {
	if o == nil {
		o = &AccessOpts{}
	}
	switch {
	case !o.NoHistory:
		return []string{"SELECT", "INSERT", "DELETE"}
	case o.Retention:
		return []string{"SELECT", "DELETE"}
	}
	return nil
}

// DispatcherPrivileges returns the privileges a dispatcher needs on the
// dispatchers table, where it reports itself while it runs: it inserts or
// updates its row, deletes it when it stops and deletes the rows of
// dispatchers unseen for an hour.
func (o *AccessOpts) DispatcherPrivileges() []string {
	return []string{"SELECT", "INSERT", "UPDATE", "DELETE"}
}

// PausePrivileges returns the privileges a dispatcher needs on the pauses
// table: it reads the pauses in force (pause and resume write it, as the
// operator).
func (o *AccessOpts) PausePrivileges() []string { return []string{"SELECT"} }

// companions are the companion tables of t whose privileges o needs, in
// the order Access reports them: the attempts table, the dispatchers
// table, then the pauses table.
func (o *AccessOpts) companions(t store.Table) []store.Companion {
	return []store.Companion{{Table: t.Attempts(), Privs: o.AttemptPrivileges()}, {Table: t.Dispatchers(), Privs: o.DispatcherPrivileges()},
		{Table: t.Pauses(), Privs: o.PausePrivileges()}}
}

// Access is what [Admin.CheckAccess] found: the server, the table's
// migration state and what the connected role may do.
type Access struct {
	// Role is the connected role (current_user).
	Role string
	// ServerVersion is server_version_num, e.g. 150020 for 15.20.
	ServerVersion int
	// Schema and Name are the table's, as the catalogs name them (Schema
	// resolved through search_path when the table was named without one);
	// both empty when the table does not exist.
	Schema, Name string
	// TableExists is whether the table exists; Missing lists the parts of
	// the migrations that are absent from an existing table ("headers
	// column", "waiters table", "wake-up trigger", an index or the audit
	// table by name): run migrate.
	TableExists bool
	Missing     []string
	// SchemaUsage is whether the role may use the table's schema.
	SchemaUsage bool
	// MissingTable, MissingWaiters, MissingAttempts and MissingDispatchers
	// are the privileges the dispatcher needs and the role lacks, on the
	// table, on its waiters table, on its attempts table and on its
	// dispatchers table; MissingPauses those on its pauses table.
	MissingTable, MissingWaiters, MissingAttempts, MissingDispatchers []string
	MissingPauses                                                     []string
	// ListenErr is the error of a trial LISTEN (rolled back), nil when it
	// worked or was not tried (NoNotify, or no table).
	ListenErr error
	// WaitersTable is the waiters table beside the table, named as the
	// table was given (NAME_waiters, or SCHEMA.NAME_waiters).
	WaitersTable string
	// AttemptsTable, DispatchersTable and PausesTable are the attempts,
	// dispatchers and pauses tables beside the table, named as
	// WaitersTable is.
	AttemptsTable, DispatchersTable, PausesTable string
	// waiters, attempts, dispatchers and pauses are those tables' bare
	// names, for Err.
	waiters, attempts, dispatchers, pauses string
}

// CheckAccess reads, from the catalogs, whether the table exists with every
// migration applied and whether the connected role holds what a dispatcher
// configured as opts needs, and tries a LISTEN on the wake-up channel
// inside a transaction it rolls back. It changes nothing.
func (a *Admin) CheckAccess(ctx context.Context, opts *AccessOpts) (*Access, error) {
	tablePrivs, waiterPrivs := opts.Privileges()
	sa, err := a.store.Access(ctx, a.db, tablePrivs, waiterPrivs, opts.companions(a.store.Table))
	if err != nil {
		return nil, fmt.Errorf("outbox: reading the catalogs: %w", err)
	}
	out := accessOf(sa, a.store.Table.Name)
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
		if r != sa.Waiters.Name { // reported above
			out.Missing = append(out.Missing, r)
		}
	}
	if (opts != nil && opts.NoNotify) || !sa.SchemaUsage {
		return out, nil
	}
	table, err := a.store.Resolve(ctx, a.db)
	if err != nil && !errors.Is(err, store.ErrTableOutdated) {
		out.ListenErr = err
		return out, nil
	}
	if err == nil {
		out.ListenErr = a.store.CheckListen(ctx, a.db, table)
	}
	return out, nil
}

// accessOf is the public form of what the store read.
func accessOf(sa *store.Access, name string) *Access {
	t := store.Table{Schema: sa.Waiters.Schema, Name: name}
	out := &Access{Role: sa.Role, ServerVersion: sa.ServerVersion, TableExists: sa.TableExists,
		SchemaUsage: sa.SchemaUsage, MissingTable: sa.MissingTable, MissingWaiters: sa.MissingWaiters,
		MissingAttempts: sa.MissingCompanions[0], MissingDispatchers: sa.MissingCompanions[1], MissingPauses: sa.MissingCompanions[2],
		WaitersTable: sa.Waiters.String(), waiters: sa.Waiters.Name,
		AttemptsTable: t.Attempts().String(), attempts: t.Attempts().Name,
		DispatchersTable: t.Dispatchers().String(), dispatchers: t.Dispatchers().Name,
		PausesTable: t.Pauses().String(), pauses: t.Pauses().Name}
	if sa.TableExists {
		out.Schema, out.Name = sa.Schema, name
	}
	return out
}

// Err returns a [*PrivilegeError] listing every privilege the role lacks
// (USAGE on the schema, then those on the table, its waiters table, its
// attempts table, its dispatchers table and its pauses table), or nil when it lacks none or the table does not exist
// (which is not a matter of privileges: see TableExists).
func (a *Access) Err() error {
	if !a.TableExists || (a.SchemaUsage && len(a.MissingTable) == 0 && len(a.MissingWaiters) == 0 &&
		len(a.MissingAttempts) == 0 && len(a.MissingDispatchers) == 0 && len(a.MissingPauses) == 0) {
		return nil
	}
	e := &PrivilegeError{Role: a.Role}
	if !a.SchemaUsage {
		e.Missing = append(e.Missing, MissingPrivileges{Privileges: []string{"USAGE"}, ObjectType: "schema",
			Object: pgx.Identifier{a.Schema}.Sanitize()})
	}
	for _, m := range []struct {
		privs []string
		name  string
	}{{a.MissingTable, a.Name}, {a.MissingWaiters, a.waiters}, {a.MissingAttempts, a.attempts}, {a.MissingDispatchers, a.dispatchers},
		{a.MissingPauses, a.pauses}} {
		if len(m.privs) > 0 {
			e.Missing = append(e.Missing, MissingPrivileges{Privileges: m.privs, ObjectType: "table",
				Object: pgx.Identifier{a.Schema, m.name}.Sanitize()})
		}
	}
	return e
}

// PrivilegeError reports that the connected role lacks privileges a
// dispatcher needs: [Dispatcher.Run], [Dispatcher.Drain] and
// [Dispatcher.Start] return it before claiming anything, instead of
// failing every claim. Its text names each privilege and object:
//
//	outbox: role "app_ro" lacks UPDATE on table "public"."outbox"
type PrivilegeError struct {
	// Role is the connected role (current_user).
	Role string
	// Missing lists what the role lacks, one entry per object.
	Missing []MissingPrivileges
}

// MissingPrivileges are the privileges a role lacks on one object.
type MissingPrivileges struct {
	// Privileges are SQL privilege names: "USAGE", "SELECT", "UPDATE"...
	Privileges []string
	// ObjectType is "schema" or "table".
	ObjectType string
	// Object is the object's quoted name: "public" or "public"."outbox".
	Object string
}

// String reads `UPDATE, DELETE on table "public"."outbox"`.
func (m MissingPrivileges) String() string {
	return strings.Join(m.Privileges, ", ") + " on " + m.ObjectType + " " + m.Object
}

func (e *PrivilegeError) Error() string {
	parts := make([]string, 0, len(e.Missing))
	for _, m := range e.Missing {
		parts = append(parts, m.String())
	}
	return "outbox: role " + pgx.Identifier{e.Role}.Sanitize() + " lacks " + strings.Join(parts, "; ")
}

// Grants returns the GRANT statements, to run as the table's owner, that
// supply what the role lacks.
func (e *PrivilegeError) Grants() []string {
	out := make([]string, 0, len(e.Missing))
	for _, m := range e.Missing {
		out = append(out, fmt.Sprintf("GRANT %s ON %s %s TO %s;", strings.Join(m.Privileges, ", "),
			strings.ToUpper(m.ObjectType), m.Object, pgx.Identifier{e.Role}.Sanitize()))
	}
	return out
}

// Is makes errors.Is(err, &PrivilegeError{}) match any PrivilegeError.
func (e *PrivilegeError) Is(target error) bool {
	_, ok := target.(*PrivilegeError)
	return ok
}

// IsPrivilegeError reports whether err is, or wraps, a [PrivilegeError].
func IsPrivilegeError(err error) bool {
	var e *PrivilegeError
	return errors.As(err, &e)
}
