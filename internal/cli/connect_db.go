package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// databaseChecks reports, in order: the server is reachable and new
// enough; the table exists with every migration applied; the role holds
// the grants the dispatcher needs; LISTEN works. A check whose
// precondition failed is left out.
func databaseChecks(ctx context.Context, e *env, s *runSetup) []checkLine {
	table := s.db.table
	db := func(c sinkutil.Check) checkLine { return checkLine{"database", c} }
	tbl := func(c sinkutil.Check) checkLine { return checkLine{"table " + table, c} }
	a, pool, err := s.db.admin(ctx, e)
	if err != nil {
		return []checkLine{db(sinkutil.Failed("reachable", err,
			"correct --dsn / OUTBOX_DSN (host, port, database, user, password) or start the server"))}
	}
	defer pool.Close()
	opts := &outbox.AccessOpts{NoNotify: s.rf.noNotify, Retention: s.retention > 0, NoHistory: s.rf.attemptHistory == 0}
	acc, err := a.CheckAccess(ctx, opts)
	if err != nil {
		return []checkLine{db(sinkutil.Failed("reachable", err, "check the server's logs"))}
	}
	version := fmt.Sprintf("PostgreSQL %d.%d, role %q", acc.ServerVersion/10000, acc.ServerVersion%10000, acc.Role)
	lines := []checkLine{db(sinkutil.Passed("reachable", version))}
	if acc.ServerVersion < outbox.MinServerVersion {
		return append(lines, db(sinkutil.Failed("server version supported",
			fmt.Errorf("PostgreSQL %d is older than %d", acc.ServerVersion/10000, outbox.MinServerVersion/10000),
			fmt.Sprintf("upgrade the server to PostgreSQL %d or later", outbox.MinServerVersion/10000))))
	}
	migrate := "run `outboxd migrate` with the same --dsn and --table (or --config), as a role that may create tables"
	switch {
	case !acc.TableExists:
		return append(lines, tbl(sinkutil.Failed("present", errors.New("the table does not exist (or the role may not see its schema)"), migrate)))
	case len(acc.Missing) > 0:
		return append(lines, tbl(sinkutil.Failed("current",
			fmt.Errorf("created by an older version: no %s", strings.Join(acc.Missing, ", ")), migrate)))
	}
	lines = append(lines, tbl(sinkutil.Passed("present and current", "every migration applied")))
	lines = append(lines, grantLine(table, acc, opts))
	if !opts.NoNotify {
		if acc.ListenErr != nil {
			lines = append(lines, db(sinkutil.Failed("LISTEN on the wake-up channel", acc.ListenErr,
				"connect outboxd to the server directly or through session pooling, or run with --no-notify (polls only)")))
		} else {
			lines = append(lines, db(sinkutil.Passed("LISTEN on the wake-up channel", "")))
		}
	}
	return lines
}

// grantLine reports the privileges the dispatcher needs, with the GRANT
// statements that would supply the missing ones.
func grantLine(table string, acc *outbox.Access, opts *outbox.AccessOpts) checkLine {
	tablePrivs, waiterPrivs := opts.Privileges()
	what := "grants: " + strings.Join(tablePrivs, ", ") + " on the table"
	if len(waiterPrivs) > 0 {
		what += "; " + strings.Join(waiterPrivs, ", ") + " on " + acc.WaitersTable
	}
	if p := opts.AttemptPrivileges(); len(p) > 0 {
		what += "; " + strings.Join(p, ", ") + " on " + acc.AttemptsTable
	}
	what += "; " + strings.Join(opts.DispatcherPrivileges(), ", ") + " on " + acc.DispatchersTable
	what += "; " + strings.Join(opts.PausePrivileges(), ", ") + " on " + acc.PausesTable
	var pe *outbox.PrivilegeError
	if !errors.As(acc.Err(), &pe) {
		return checkLine{"role " + acc.Role, sinkutil.Passed(what, "")}
	}
	missing := make([]string, 0, len(pe.Missing))
	for _, m := range pe.Missing {
		missing = append(missing, m.String())
	}
	return checkLine{"role " + acc.Role, sinkutil.Failed(what, fmt.Errorf("lacks %s", strings.Join(missing, "; ")),
		"as the table's owner: "+strings.Join(pe.Grants(), " "))}
}
