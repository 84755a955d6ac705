package cli_test

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// TestLogStream checks what reaches the log and the server from a run: in
// JSON mode every line of stderr is a JSON object, client libraries' own
// lines included, with durations as text; sessions carry an
// application_name.
func TestLogStream(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)

	t.Run("RedisAtAClosedPortLogsOnlyJSON", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		c.migrate(t)
		c.enqueue(t, "agg", `{"n":1}`)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		closed := ln.Addr().String()
		require.NoError(t, ln.Close())
		p := start(t, bin, c.env, nil, "run", "--table", c.table, "--log-format", "json",
			"--retry-base", "100ms", "--sink", "redis://"+closed+"/0?stream=outbox")
		// go-redis logs every dial it gives up on; wait for the first.
		require.Eventually(t, func() bool {
			return strings.Count(p.stderr.String(), "connection refused") >= 2
		}, 30*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr.String())
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		r := p.wait()
		requireOK(t, r)
		var fromLibrary, started int
		for line := range strings.Lines(r.stderr) {
			var rec map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &rec), "stderr line %q is not a JSON object\n%s", line, r)
			switch rec["msg"] {
			case "redissink: go-redis":
				fromLibrary++
				require.Equal(t, "WARN", rec["level"])
				require.Contains(t, rec["detail"], "connection refused")
			case "dispatcher started":
				started++
				require.Equal(t, "1m0s", rec["lease"], "a duration is written as text, not nanoseconds")
			}
		}
		require.Positive(t, fromLibrary, "go-redis's own lines are records of the log\n%s", r)
		require.Equal(t, 1, started, "%s", r)
	})

	t.Run("ApplicationName", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		c.migrate(t)
		// appNames runs outboxd until it is up (its log says ready) and its
		// sessions on this test's table show in pg_stat_activity, and
		// returns their application names.
		appNames := func(t *testing.T, env []string, ready string, args ...string) []string {
			t.Helper()
			p := start(t, bin, env, nil, args...)
			var names []string
			require.Eventually(t, func() bool {
				if !strings.Contains(p.stderr.String(), ready) {
					return false
				}
				rows, err := testdb.Pool(t).Query(context.Background(),
					`SELECT DISTINCT application_name FROM pg_stat_activity
					 WHERE pid <> pg_backend_pid() AND strpos(query, $1) > 0 AND application_name <> $2 ORDER BY 1`, c.schema, testdb.AppName)
				require.NoError(t, err)
				names = names[:0]
				for rows.Next() {
					var n string
					require.NoError(t, rows.Scan(&n))
					names = append(names, n)
				}
				require.NoError(t, rows.Err())
				return len(names) > 0
			}, 30*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr.String())
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
			requireOK(t, p.wait())
			return slices.Clone(names)
		}
		run := []string{"run", "--table", c.table, "--sink", "null:", "--poll-interval", "50ms"}
		withEnv := func(kv ...string) []string {
			return append(slices.DeleteFunc(slices.Clone(c.env), func(e string) bool { return strings.HasPrefix(e, "PGAPPNAME=") }), kv...)
		}
		const started = "dispatcher started"
		require.Equal(t, []string{"outboxd"}, appNames(t, withEnv(), started, run...))
		require.Equal(t, []string{"from-env"}, appNames(t, withEnv("PGAPPNAME=from-env"), started, run...))
		require.Equal(t, []string{"from-dsn"}, appNames(t, withEnv("PGAPPNAME=from-env"), started,
			append(slices.Clone(run), "--dsn", dsnWith(t, c.dsn, "application_name", "from-dsn"))...))
		require.Equal(t, []string{"outboxd-console"}, appNames(t, withEnv(), "console listening",
			"console", "--table", c.table, "--addr", "127.0.0.1:0", "--sample-interval", "50ms"))
	})
}

// dsnWith returns dsn with one more setting, in whichever form dsn has.
func dsnWith(t *testing.T, dsn, key, value string) string {
	t.Helper()
	if strings.Contains(dsn, "://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + key + "=" + value
	}
	return dsn + " " + key + "=" + value
}
