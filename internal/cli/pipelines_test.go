package cli_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
)

// tenantSchema creates schema name with a migrated outbox, dropped when
// the test ends.
func tenantSchema(t *testing.T, bin, dsn, name string) {
	t.Helper()
	c := &cli{bin: bin, dsn: dsn, schema: name, table: name + ".outbox", env: envWith(dsn)}
	c.exec(t, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		_, _ = testdb.Pool(t).Exec(t.Context(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	c.migrate(t)
}

// keysByNamespace returns the identities (key) stdout's messages carry,
// counted by their namespace (what precedes the last ':').
func keysByNamespace(t *testing.T, stdout string) (map[string]int, map[string]int) {
	t.Helper()
	byNS, seen := map[string]int{}, map[string]int{}
	for _, m := range jsonLines(t, stdout) {
		key := stringOf(t, m["key"])
		seen[key]++
		ns := key[:max(strings.LastIndex(key, ":"), 0)]
		byNS[ns]++
	}
	return byNS, seen
}

// testPipelines: one daemon relays the pipelines of a config file, two
// tables and a pattern over tenant schemas: every message once, each
// pipeline's ids qualified with its name; a tenant created while it runs
// is picked up at the next discovery, a dropped one stopped; a pipeline
// whose table is missing fails alone; config check prints a block per
// pipeline; files that cannot mean anything are refused with the line.
func testPipelines(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	a, b := newCLI(t, bin), newCLI(t, bin)
	a.migrate(t)
	b.migrate(t)
	base := testdb.NewSchema(t) // tenants are base_t1, base_t2, ...
	tenant := func(i int) *cli {
		name := fmt.Sprintf("%s_t%d", base, i)
		tenantSchema(t, bin, dsn, name)
		return &cli{bin: bin, dsn: dsn, schema: name, table: name + ".outbox", env: envWith(dsn)}
	}
	t1, t2 := tenant(1), tenant(2)
	// migrate --pattern migrates every outbox table the pattern matches.
	pattern := base + "_t*.outbox"
	mig := runBin(t, bin, envWith(dsn), nil, "migrate", "--pattern", pattern)
	requireOK(t, mig)
	require.Equal(t, "migrated table "+t1.table+"\nmigrated table "+t2.table+"\n", mig.stdout)
	dry := runBin(t, bin, envWith(dsn), nil, "migrate", "--pattern", pattern, "--dry-run")
	requireOK(t, dry)
	require.Equal(t, "-- "+t1.table+"\n-- "+t2.table+"\n", dry.stdout, "current tables: nothing to run")
	none := runBin(t, bin, envWith(dsn), nil, "migrate", "--pattern", base+"_none*.outbox")
	require.Equal(t, 1, none.code, "%s", none)
	require.Contains(t, none.stderr, "matches no outbox table")
	both := runBin(t, bin, envWith(dsn), nil, "migrate", "--pattern", pattern, "--table", t1.table)
	require.Equal(t, 2, both.code, "%s", both)
	for _, c := range []*cli{a, a, b, t1, t2, t2} {
		c.enqueue(t, "agg", `{"n":1}`)
	}
	// A schema beside the pattern's: its underscore is not a wildcard.
	other := testdb.NewSchema(t)
	oc := &cli{bin: bin, dsn: dsn, schema: other, table: other + ".outbox", env: envWith(dsn)}
	oc.migrate(t)
	oc.enqueue(t, "agg", `{"n":1}`)

	dir := t.TempDir()
	file := filepath.Join(dir, "pipelines.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, `sink: "stdout:"
workers: 2
pipelines:
  - name: a
    table: %s
  - name: b
    table: %s
    batch: 10
  - name: tenants
    table: %s_t*.outbox
    lease-mode: row
`, a.table, b.table, base), 0o600))

	check := runBin(t, bin, envWith(dsn), nil, "config", "check", "--config", file)
	requireOK(t, check)
	require.Contains(t, check.stdout, "pipeline a: table "+a.table+"\n")
	require.Contains(t, check.stdout, "pipeline tenants: table "+base+"_t*.outbox (a pattern: matched at the start and every 30s)\n")
	require.Regexp(t, `(?m)^batch\s+10\s+pipeline$`, check.stdout)
	require.Contains(t, check.stdout, "configuration is valid (3 pipelines)")
	connect := runBin(t, bin, envWith(dsn), nil, "config", "check", "--connect", "--config", file)
	requireOK(t, connect)
	require.Contains(t, connect.stdout, fmt.Sprintf("%s_t*.outbox matches 2 tables: %s, %s", base, t1.table, t2.table))

	r := runBin(t, bin, envWith(dsn), nil, "run", "--config", file, "--drain")
	requireOK(t, r)
	byNS, seen := keysByNamespace(t, r.stdout)
	require.Equal(t, map[string]int{"a": 2, "b": 1, "tenants." + t1.table: 1, "tenants." + t2.table: 2}, byNS, "%s", r)
	for k, n := range seen {
		require.Equal(t, 1, n, "message %s delivered %d times", k, n)
	}
	for _, c := range []*cli{a, b, t1, t2} {
		require.Zero(t, c.count(t, "status <> 'done'"), "every message of %s done", c.table)
	}
	require.Equal(t, 1, oc.count(t, "status = 'pending'"), "a table no pipeline names is left alone")

	// Running: a tenant created meanwhile is picked up at the next
	// discovery; one dropped is stopped; a signal stops the whole.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	app := "pipelines-" + base
	appDSN := dsn + map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")] + "application_name=" + app
	p := start(t, bin, envWith(appDSN), nil, "run", "--config", file, "--discover-interval", "300ms", "--poll-interval", "200ms", "--metrics-addr", addr)
	require.Eventually(t, func() bool { return strings.Count(p.stderr.String(), "starting a pipeline") == 4 },
		30*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr)
	// The four tables of the database share one LISTEN connection.
	require.Eventually(t, func() bool {
		var n int
		err := testdb.Pool(t).QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query ~ '^(UN)?LISTEN '`, app).Scan(&n)
		return err == nil && n == 1
	}, 10*time.Second, 20*time.Millisecond, "one listening connection for the database")
	// One /metrics for all, each series with its pipeline and table; one
	// /readyz, ready once every pipeline is.
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	series := []string{
		`outbox_dispatcher_up{pipeline="a",table="` + a.table + `"} 1`,
		`outbox_dispatcher_up{pipeline="b",table="` + b.table + `"} 1`,
		`outbox_dispatcher_up{pipeline="tenants",table="` + t1.table + `"} 1`,
		`outbox_messages{pipeline="tenants",status="done",table="` + t2.table + `"} 2`,
	}
	var scrape string
	require.Eventually(t, func() bool {
		_, scrape = get("/metrics")
		for _, s := range series {
			if !strings.Contains(scrape, s) {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every pipeline's series with its labels")
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	t3 := tenant(3)
	id := t3.enqueue(t, "agg", `{"n":3}`)
	require.Eventually(t, func() bool { return t3.statusOf(t, id) == "done" }, 30*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr)
	t2.exec(t, "DROP SCHEMA "+pgx.Identifier{t2.schema}.Sanitize()+" CASCADE")
	require.Eventually(t, func() bool {
		return strings.Contains(p.stderr.String(), "stopping a pipeline: its pattern no longer matches its table")
	}, 30*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr)
	require.Eventually(t, func() bool {
		_, scrape := get("/metrics")
		return strings.Contains(scrape, `table="`+t3.table+`"`) && !strings.Contains(scrape, `table="`+t2.table+`"`)
	}, 30*time.Second, 50*time.Millisecond, "a stopped pipeline leaves no series; a new one has them")
	// SIGHUP reloads the file: b removed stops, c added starts (and
	// delivers the table no pipeline named), a unchanged goes on; a file
	// that does not validate is refused and changes nothing.
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, `sink: "stdout:"
workers: 2
pipelines:
  - name: a
    table: %s
  - name: c
    table: %s
  - name: tenants
    table: %s_t*.outbox
    lease-mode: row
`, a.table, oc.table, base), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return oc.count(t, "status = 'done'") == 1 }, 30*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr)
	require.Contains(t, p.stderr.String(), "reloaded the config file")
	require.Equal(t, 1, strings.Count(p.stderr.String(), "stopping a pipeline: removed from the file or changed"), "only b: %s", p.stderr)
	require.NoError(t, os.WriteFile(file, []byte("pipelines:\n  - {name: x, table: t, wokers: 2}\n"), 0o600))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "reload refused: the pipelines running go on") },
		30*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr)
	late := a.enqueue(t, "agg", `{"n":9}`)
	require.Eventually(t, func() bool { return a.statusOf(t, late) == "done" }, 30*time.Second, 50*time.Millisecond, "a still relayed")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	stopped := p.wait()
	requireOK(t, stopped)
	byNS, _ = keysByNamespace(t, stopped.stdout)
	require.Equal(t, map[string]int{"tenants." + t3.table: 1, "c": 1, "a": 1}, byNS, "%s", stopped)

	// A pipeline whose table is missing fails alone: the others drain.
	broken := filepath.Join(dir, "broken.yaml")
	a.enqueue(t, "agg", `{"n":2}`)
	require.NoError(t, os.WriteFile(broken, fmt.Appendf(nil, `sink: "stdout:"
pipelines:
  - {name: good, table: %s}
  - {name: gone, table: %s.missing}
`, a.table, base), 0o600))
	br := runBin(t, bin, envWith(dsn), nil, "run", "--config", broken, "--drain")
	require.Equal(t, 1, br.code, "%s", br)
	require.Contains(t, br.stderr, `outboxd: 1 pipeline failed: gone: `)
	byNS, _ = keysByNamespace(t, br.stdout)
	require.Equal(t, map[string]int{"good": 1}, byNS, "%s", br)

	// Files that cannot mean anything: exit 2, naming the line.
	for _, tc := range []struct{ body, want string }{
		{"pipelines:\n  - name: x\n    table: t\n    wokers: 2\n", `line 2: pipeline 1: unknown key "wokers" (line 4)`},
		{"pipelines:\n  - {name: x, table: t}\n  - {name: x, table: u}\n", `line 3: pipeline 2: name "x" is taken by the pipeline at line 2`},
		{"pipelines:\n  - {name: x, table: t, metrics-addr: ':9090'}\n", `metrics-addr is a setting of the whole process: give it at the top level`},
		{"pipelines:\n  - {name: x}\n", `pipeline "x": no table`},
		{"pipelines:\n  - {name: 'a b', table: t}\n", `name: want 1 to 63 letters`},
		{"pipelines:\n  - {name: x, table: a.b.c}\n", `want NAME, SCHEMA.NAME or a pattern of either`},
		{"pipelines: []\n", `pipelines: the list is empty`},
		{"pipelines:\n  - {name: x, table: t, batch: many}\n", `line 2: pipeline "x": batch:`},
	} {
		f := filepath.Join(dir, "bad.yaml")
		require.NoError(t, os.WriteFile(f, []byte(tc.body), 0o600))
		bad := runBin(t, bin, envWith(dsn), nil, "run", "--config", f, "--drain")
		require.Equal(t, 2, bad.code, "%s", bad)
		require.Contains(t, bad.stderr, tc.want)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(bad.stderr), "\n")+1, "one error line: %s", bad)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--table", a.table}, "has pipelines: name each table in its pipeline, not with --table"},
	} {
		bad := runBin(t, bin, envWith(dsn), nil, append([]string{"run", "--config", broken, "--drain"}, tc.args...)...)
		require.Equal(t, 2, bad.code, "%s", bad)
		require.Contains(t, bad.stderr, tc.want)
	}
}
