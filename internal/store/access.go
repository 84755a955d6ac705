package store

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Access is what the catalogs say about the table and the connected role.
type Access struct {
	Role string
	// ServerVersion is server_version_num, e.g. 150020 for 15.20.
	ServerVersion int
	// Schema is the schema the table is in, as the catalogs name it;
	// empty when the table does not exist.
	Schema string
	// Waiters is the waiters table, named as the table was (with its
	// schema when the table was named with one).
	Waiters       Table
	TableExists   bool
	HeadersColumn bool
	WaitersExists bool
	WakeTrigger   bool
	// MissingRelations are the indexes and tables the migrations create
	// beside the table that are absent (bare names).
	MissingRelations []string
	// SchemaUsage is whether the role may use the table's schema; false
	// when the table does not exist.
	SchemaUsage bool
	// MissingTable and MissingWaiters are the asked-for privileges the role
	// lacks on each table; nil when that table does not exist.
	MissingTable, MissingWaiters []string
	// MissingCompanions are, aligned with the companions asked about,
	// the privileges the role lacks on each; none when it does not exist.
	MissingCompanions [][]string
}

// Companion is a table the migrations create beside the table (see
// Table.Companion), with the privileges a role needs on it.
type Companion struct {
	Table Table
	Privs []string
}

// Access reads the table's migration state and the role's privileges:
// tablePrivs on the table, waiterPrivs on the waiters table and each
// companion's on it.
func (s *Store) Access(ctx context.Context, db DB, tablePrivs, waiterPrivs []string, companions []Companion) (*Access, error) {
	a := Access{Waiters: s.Table.Waiters()}
	suffixes, privs := make([]string, len(companions)), make([]string, len(companions))
	for i, c := range companions {
		suffixes[i], privs[i] = strings.TrimPrefix(c.Table.Name, s.Table.Name), strings.Join(c.Privs, ",")
	}
	var usage *bool
	var missing []string
	err := db.QueryRow(ctx, s.access, s.Table.ident(""), s.Table.Waiters().ident(""), s.Table.WakeTrigger(),
		tablePrivs, waiterPrivs, s.Table.Schema, s.Table.Name, s.migratedRelations(), suffixes, privs).Scan(&a.Role, &a.ServerVersion, &a.Schema,
		&a.TableExists, &a.HeadersColumn, &a.WaitersExists, &a.WakeTrigger, &a.MissingRelations, &usage,
		&a.MissingTable, &a.MissingWaiters, &missing)
	if err != nil {
		return nil, translate(err)
	}
	a.MissingCompanions = make([][]string, len(companions))
	for i, m := range missing {
		if m != "" {
			a.MissingCompanions[i] = strings.Split(m, ",")
		}
	}
	a.SchemaUsage = usage != nil && *usage
	return &a, nil
}

// CheckListen runs LISTEN on the table's wake-up channel inside a
// transaction that is rolled back, so nothing stays registered: it shows
// that the connection carries LISTEN at all. t is the table as Resolve
// returns it.
func (s *Store) CheckListen(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, t Table) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return translate(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the rollback is the point
	_, err = tx.Exec(ctx, Listen(t.Channel()))
	return translate(err)
}

// migratedRelations are the bare names of what the migrations create beside
// the table: its indexes and the waiters and audit tables.
func (s *Store) migratedRelations() []string {
	var out []string
	for _, suffix := range relationSuffixes {
		out = append(out, s.Table.Name+suffix)
	}
	return out
}

// Listen is the LISTEN statement for a notification channel.
func Listen(channel string) string { return "LISTEN " + pgx.Identifier{channel}.Sanitize() }

// Notify sends one notification on channel with payload.
func Notify(ctx context.Context, db DB, channel, payload string) error {
	_, err := db.Exec(ctx, rawSQL("sql/notify.sql"), channel, payload)
	return translate(err)
}
