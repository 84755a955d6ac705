package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// testMigrateDryRun: `migrate --dry-run` prints the SQL migrate would run
// and changes nothing; for a current table it prints nothing.
func testMigrateDryRun(t *testing.T, bin string) {
	c := newCLI(t, bin)
	r := c.ok(t, "migrate", "--dry-run", "--table", c.table, "--lock-timeout", "750ms")
	require.True(t, strings.HasPrefix(r.stdout, "BEGIN;\nSET LOCAL lock_timeout = '750ms';\n-- 001_create: table\n"), "%s", r)
	require.Contains(t, r.stdout, "CREATE TABLE IF NOT EXISTS "+c.quoted()+" (")
	require.Contains(t, r.stdout, "-- 002_headers: headers column\nALTER TABLE "+c.quoted()+" ADD COLUMN IF NOT EXISTS headers jsonb;\n")
	require.True(t, strings.HasSuffix(r.stdout, "COMMIT;\n"), "%s", r)
	var exists bool
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(), "SELECT to_regclass($1) IS NOT NULL", c.quoted()).Scan(&exists))
	require.False(t, exists, "a dry run creates nothing")

	c.migrate(t)
	r = c.ok(t, "migrate", "--dry-run", "--table", c.table)
	require.Empty(t, r.stdout, "nothing to run on a current table")

	c.exec(t, "ALTER TABLE "+c.quoted()+" DROP COLUMN headers")
	r = c.ok(t, "migrate", "--dry-run", "--table", c.table)
	require.Equal(t, "BEGIN;\nSET LOCAL lock_timeout = '2000ms';\n-- 002_headers: headers column\nALTER TABLE "+c.quoted()+
		" ADD COLUMN IF NOT EXISTS headers jsonb;\nCOMMIT;\n", r.stdout)
	r = c.run(t, "run", "--drain", "--table", c.table)
	require.Equal(t, 1, r.code, "the dry run left the table outdated: %s", r)

	requireFailure(t, c.run(t, "migrate", "--dry-run", "--table", c.table, "--lock-timeout", "0s"), 2)
}

// testMigrateCurrentTableUnderLock: re-running migrate (every deploy does)
// on a current table returns at once, even while another transaction holds
// the table in ACCESS EXCLUSIVE mode, since it only reads the catalog.
func testMigrateCurrentTableUnderLock(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	tx, err := testdb.Pool(t).Begin(context.Background())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // the lock ends with the test
	_, err = tx.Exec(context.Background(), "LOCK TABLE "+c.quoted()+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	// A lock wait would outlast --lock-timeout many times over and retry
	// until cmdTimeout kills the command.
	r := c.ok(t, "migrate", "--table", c.table, "--lock-timeout", "1h")
	require.Equal(t, "migrated table "+c.table+"\n", r.stdout)
	require.Empty(t, r.stderr, "nothing to apply, nothing to say")
}
