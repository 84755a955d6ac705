package cli_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// testRunRefusesRoleWithoutPrivileges: `run --drain` as a role that may only
// read the table exits 1 at once with one line naming what it lacks and the
// GRANT that supplies it; after that GRANT it relays. Before, it logged
// "claim failed; retrying" and never returned.
func testRunRefusesRoleWithoutPrivileges(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	id := c.insert(t, "a", `{"n":1}`)
	name := "app_ro_" + c.schema
	role := pgx.Identifier{name}.Sanitize()
	c.exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool := testdb.Pool(t)
		_, _ = pool.Exec(ctx, "DROP OWNED BY "+role)
		_, err := pool.Exec(ctx, "DROP ROLE "+role)
		require.NoError(t, err)
	})
	c.exec(t, "GRANT SELECT ON "+c.quoted()+" TO "+role)
	schema := pgx.Identifier{c.schema}.Sanitize()
	waiters := pgx.Identifier{c.schema, "outbox_waiters"}.Sanitize()
	attempts := pgx.Identifier{c.schema, "outbox_attempts"}.Sanitize()
	dispatchers := pgx.Identifier{c.schema, "outbox_dispatchers"}.Sanitize()
	pauses := pgx.Identifier{c.schema, "outbox_pauses"}.Sanitize()
	env := envWith(withUser(t, c.dsn, name, ""))
	run := func(args ...string) result {
		t.Helper()
		r := runBin(t, bin, env, nil, append([]string{"run", "--drain", "--sink", "stdout:", "--table", c.table}, args...)...)
		requireFailure(t, r, 1)
		return r
	}

	r := run()
	require.Equal(t, "outboxd: outbox: role "+role+" lacks USAGE on schema "+schema+"; UPDATE on table "+c.quoted()+
		"; SELECT, INSERT, UPDATE, DELETE on table "+waiters+"; SELECT, INSERT, DELETE on table "+attempts+
		"; SELECT, INSERT, UPDATE, DELETE on table "+dispatchers+"; SELECT on table "+pauses+
		" (as the table's owner: GRANT USAGE ON SCHEMA "+schema+
		" TO "+role+"; GRANT UPDATE ON TABLE "+c.quoted()+" TO "+role+"; GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "+
		waiters+" TO "+role+"; GRANT SELECT, INSERT, DELETE ON TABLE "+attempts+" TO "+role+
		"; GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "+dispatchers+" TO "+role+"; GRANT SELECT ON TABLE "+pauses+" TO "+role+";)\n", r.stderr)
	c.exec(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+dispatchers+" TO "+role)
	c.exec(t, "GRANT SELECT ON "+pauses+" TO "+role)

	// Recording no attempt history, it needs nothing on the attempts
	// table but what retention deletes there.
	c.exec(t, "GRANT USAGE ON SCHEMA "+schema+" TO "+role)
	r = run("--no-notify", "--attempt-history", "0")
	require.Equal(t, "outboxd: outbox: role "+role+" lacks UPDATE on table "+c.quoted()+"; SELECT, DELETE on table "+waiters+
		" (as the table's owner: GRANT UPDATE ON TABLE "+c.quoted()+" TO "+role+"; GRANT SELECT, DELETE ON TABLE "+
		waiters+" TO "+role+";)\n", r.stderr)
	c.exec(t, "GRANT SELECT, INSERT, DELETE ON "+attempts+" TO "+role)
	r = run("--no-notify")
	require.Equal(t, "outboxd: outbox: role "+role+" lacks UPDATE on table "+c.quoted()+"; SELECT, DELETE on table "+waiters+
		" (as the table's owner: GRANT UPDATE ON TABLE "+c.quoted()+" TO "+role+"; GRANT SELECT, DELETE ON TABLE "+
		waiters+" TO "+role+";)\n", r.stderr, "polling only, each claim still clears its waiter row")
	c.exec(t, "GRANT SELECT, DELETE ON "+waiters+" TO "+role)
	r = run("--no-notify", "--retention", "7d")
	require.Equal(t, "outboxd: outbox: role "+role+" lacks UPDATE, DELETE on table "+c.quoted()+
		" (as the table's owner: GRANT UPDATE, DELETE ON TABLE "+c.quoted()+" TO "+role+";)\n", r.stderr)
	r = run("--no-notify")
	require.Equal(t, "outboxd: outbox: role "+role+" lacks UPDATE on table "+c.quoted()+
		" (as the table's owner: GRANT UPDATE ON TABLE "+c.quoted()+" TO "+role+";)\n", r.stderr)
	require.Equal(t, "pending", c.statusOf(t, id), "nothing was claimed")

	_, fix, ok := strings.Cut(strings.TrimSuffix(r.stderr, ")\n"), "(as the table's owner: ")
	require.True(t, ok, r.stderr)
	c.exec(t, fix)
	r = runBin(t, bin, env, nil, "run", "--drain", "--sink", "stdout:", "--table", c.table, "--no-notify")
	requireOK(t, r)
	require.Equal(t, "done", c.statusOf(t, id))
}
