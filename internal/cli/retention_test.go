package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	outboxcli "github.com/outboxd/outbox/internal/cli"
	"github.com/outboxd/outbox/internal/testdb"
)

// TestRunRetention: `run --retention 7d` deletes done rows older than seven
// days while it relays, and keeps newer ones; it stops with the daemon.
func TestRunRetention(t *testing.T) {
	dsn := testdb.DSN(t)
	schema := testdb.NewSchema(t)
	table := schema + ".outbox"
	migrate(t, dsn, table)
	enqueue(t, dsn, table)
	enqueue(t, dsn, table)
	pool := testdb.Pool(t)
	_, err := pool.Exec(t.Context(), "UPDATE "+table+" SET status = 'done', done_at = now() - interval '10 days'"+
		" WHERE id = (SELECT min(id) FROM "+table+")")
	require.NoError(t, err)
	// rows is how many rows the table holds, and how many of them are done.
	rows := func() (all, done int) {
		require.NoError(t, pool.QueryRow(context.Background(),
			"SELECT count(*), count(*) FILTER (WHERE status = 'done') FROM "+table).Scan(&all, &done))
		return all, done
	}

	ctx, cancel := context.WithTimeout(t.Context(), cmdTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- outboxcli.Main(ctx, []string{"run", "--table", table, "--retention", "7d", "--sink", "stdout:"},
			strings.NewReader(""), &stdout, &stderr)
	}()
	// The old done row goes; the other one is delivered and stays done.
	require.Eventually(t, func() bool { all, done := rows(); return all == 1 && done == 1 },
		cmdTimeout, 20*time.Millisecond, "retention never purged the old row")
	var old int
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE done_at < now() - interval '7 days'").Scan(&old))
	require.Zero(t, old)
	cancel()
	require.Equal(t, outboxcli.ExitOK, <-done, "stderr:\n%s", stderr.String())
}
