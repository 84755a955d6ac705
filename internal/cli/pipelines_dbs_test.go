package cli_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// keyReceiver is a webhook receiver that counts the Idempotency-Key of
// every request it answers 200.
type keyReceiver struct {
	mu   sync.Mutex
	keys map[string]int
}

func (r *keyReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	r.keys[req.Header.Get("Idempotency-Key")]++
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *keyReceiver) snapshot() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.keys))
	for k, n := range r.keys {
		out[k] = n
	}
	return out
}

// outboxDB is one test database with the outbox tables the test made in it.
type outboxDB struct {
	dsn  string
	pool *pgxpool.Pool
}

func newOutboxDB(t *testing.T, dsn string) *outboxDB {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &outboxDB{dsn: dsn, pool: pool}
}

// table creates schema and migrates its outbox; returns SCHEMA.outbox.
func (d *outboxDB) table(t *testing.T, schema string) string {
	t.Helper()
	_, err := d.pool.Exec(t.Context(), "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	a, err := outbox.NewAdmin(d.pool, schema+".outbox")
	require.NoError(t, err)
	require.NoError(t, a.Migrate(t.Context()))
	return schema + ".outbox"
}

// insert adds n messages to table.
func (d *outboxDB) insert(t *testing.T, table string, n int) {
	t.Helper()
	schema := strings.TrimSuffix(table, ".outbox")
	_, err := d.pool.Exec(t.Context(), "INSERT INTO "+pgx.Identifier{schema, "outbox"}.Sanitize()+
		" (aggregate_type, aggregate_id, event_type, payload) SELECT 'order', g::text, 'OrderCreated', '{}' FROM generate_series(1, $1) g", n)
	require.NoError(t, err)
}

// undone counts the messages of table not done.
func (d *outboxDB) undone(t *testing.T, table string) int {
	t.Helper()
	schema := strings.TrimSuffix(table, ".outbox")
	var n int
	require.NoError(t, d.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, "outbox"}.Sanitize()+
		" WHERE status <> 'done'").Scan(&n))
	return n
}

// testPipelinesAcrossDatabases: one daemon over three databases, two
// tables in the first, a pattern over 20 tenant schemas of the second (10
// there at the start, 10 created and 5 dropped while it runs), a table of
// the third and a pipeline there whose table is missing; two sinks (stdout
// and a webhook receiver). Every message is delivered once, to its
// pipeline's sink; each tenant created is picked up within its discovery
// interval; the broken pipeline fails alone; each database has one LISTEN
// connection.
func testPipelinesAcrossDatabases(t *testing.T, bin string) {
	app := "pipelines-dbs-" + testdb.NewSchema(t)
	withApp := func(dsn string) string {
		sep := map[bool]string{true: "&", false: "?"}[strings.Contains(dsn, "?")]
		return dsn + sep + "application_name=" + app
	}
	a := newOutboxDB(t, testdb.DSN(t))
	b := newOutboxDB(t, testdb.NewDatabase(t))
	c := newOutboxDB(t, testdb.NewDatabase(t))
	orders, billing := testdb.NewSchema(t)+".outbox", testdb.NewSchema(t)+".outbox"
	const crm = "crm.outbox"
	tenant := func(i int) string { return fmt.Sprintf("tenant_%02d.outbox", i) }
	for i := 1; i <= 10; i++ {
		b.table(t, strings.TrimSuffix(tenant(i), ".outbox"))
		b.insert(t, tenant(i), 2)
	}

	rcv := &keyReceiver{keys: map[string]int{}}
	srv := httptest.NewServer(rcv)
	t.Cleanup(srv.Close)
	const discover = 500 * time.Millisecond
	file := filepath.Join(t.TempDir(), "pipelines.yaml")
	pipelines := fmt.Sprintf(`sink: "stdout:"
poll-interval: 200ms
discover-interval: %s
pipelines:
  - {name: orders, table: %s}
  - {name: billing, table: %s, sink: "%s/hook"}
  - {name: tenants, dsn: "%s", table: "tenant_*.outbox", sink: "%s/hook"}
  - {name: crm, dsn: "%s", table: crm.outbox}
`, discover, orders, billing, srv.URL, withApp(b.dsn), srv.URL, withApp(c.dsn))
	require.NoError(t, os.WriteFile(file, []byte(pipelines), 0o600))
	// migrate --config migrates every pipeline's table in its database,
	// and every table a pattern matches now.
	mig := runBin(t, bin, envWith(a.dsn), nil, "migrate", "--config", file)
	requireOK(t, mig)
	wantMig := "pipeline orders:\nmigrated table " + orders + "\npipeline billing:\nmigrated table " + billing + "\npipeline tenants:\n"
	for i := 1; i <= 10; i++ {
		wantMig += "migrated table " + tenant(i) + "\n"
	}
	require.Equal(t, wantMig+"pipeline crm:\nmigrated table crm.outbox\n", mig.stdout)
	a.insert(t, orders, 3)
	a.insert(t, billing, 4)
	c.insert(t, crm, 5)
	// A pipeline whose table is missing.
	require.NoError(t, os.WriteFile(file, []byte(pipelines+fmt.Sprintf("  - {name: broken, dsn: \"%s\", table: missing.outbox}\n", withApp(c.dsn))), 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	consoleAddr := ln.Addr().String()
	require.NoError(t, ln.Close())
	p := start(t, bin, envWith(withApp(a.dsn)), nil, "run", "--config", file, "--console-addr", consoleAddr)
	// One console for every pipeline's table, each with its health.
	consoleTables := func() map[string]string {
		resp, err := http.Get("http://" + consoleAddr + "/api/v1/tables")
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var out struct {
			Tables []struct{ Name, Health string }
		}
		if json.NewDecoder(resp.Body).Decode(&out) != nil {
			return nil
		}
		m := map[string]string{}
		for _, tb := range out.Tables {
			m[tb.Name] = tb.Health
		}
		return m
	}

	// The broken pipeline fails alone; the others deliver what waits.
	require.Eventually(t, func() bool {
		return strings.Contains(p.stderr.String(), "pipeline failed; the others go on, this one starts again")
	}, 30*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr)
	require.Contains(t, p.stderr.String(), `pipeline=broken`)
	require.Eventually(t, func() bool {
		if a.undone(t, orders)+a.undone(t, billing)+c.undone(t, crm) > 0 {
			return false
		}
		for i := 1; i <= 10; i++ {
			if b.undone(t, tenant(i)) > 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr)
	require.Eventually(t, func() bool {
		m := consoleTables()
		return len(m) == 2+10+1+1 && m["missing.outbox"] != "" && m[orders] == "" && m[tenant(3)] == ""
	}, 30*time.Second, 50*time.Millisecond, "the console lists every table, the broken one with its failure: %v", consoleTables())
	require.Contains(t, consoleTables()["missing.outbox"], "failed, starting again in 30s")
	// A table's page is served from its own database.
	resp, err := http.Get("http://" + consoleAddr + "/api/v1/tables/" + crm + "/overview")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	require.Contains(t, string(body), `"done_estimate": 5`)
	// One LISTEN connection per database, for all its tables.
	require.Eventually(t, func() bool {
		rows, err := testdb.Pool(t).Query(t.Context(), `SELECT datname, count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND query ~ '^(UN)?LISTEN ' GROUP BY datname`, app)
		if err != nil {
			return false
		}
		per, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
			DB string
			N  int
		}])
		if err != nil || len(per) != 3 {
			return false
		}
		for _, d := range per {
			if d.N != 1 {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "one listening session in each of the three databases")

	// Tenants created while it runs are picked up within the discovery
	// interval (and the time a table takes to start); dropped ones stop.
	for i := 11; i <= 20; i++ {
		b.table(t, strings.TrimSuffix(tenant(i), ".outbox"))
		made := time.Now()
		b.insert(t, tenant(i), 1)
		require.Eventually(t, func() bool { return b.undone(t, tenant(i)) == 0 }, 30*time.Second, 20*time.Millisecond,
			"stderr:\n%s", p.stderr)
		require.Less(t, time.Since(made), discover+3*time.Second, "tenant %d picked up within its discovery interval", i)
	}
	for i := 1; i <= 5; i++ {
		_, err := b.pool.Exec(t.Context(), "DROP SCHEMA "+pgx.Identifier{strings.TrimSuffix(tenant(i), ".outbox")}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return strings.Count(p.stderr.String(), "stopping a pipeline: its pattern no longer matches its table") == 5
	}, 30*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr)
	require.Eventually(t, func() bool {
		m := consoleTables()
		_, gone := m[tenant(1)]
		_, added := m[tenant(20)]
		return !gone && added
	}, 30*time.Second, 50*time.Millisecond, "the console follows the tenants: %v", consoleTables())
	// The tenants left and the other databases go on.
	for i := 6; i <= 20; i++ {
		b.insert(t, tenant(i), 1)
	}
	a.insert(t, orders, 1)
	c.insert(t, crm, 1)
	require.Eventually(t, func() bool {
		for i := 6; i <= 20; i++ {
			if b.undone(t, tenant(i)) > 0 {
				return false
			}
		}
		return a.undone(t, orders)+c.undone(t, crm) == 0
	}, 30*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr)

	// status --config: every pipeline's tables, or one pipeline's; the
	// missing table is reported and fails the command.
	st := runBin(t, bin, envWith(a.dsn), nil, "status", "--config", file, "--json")
	require.Equal(t, 1, st.code, "%s", st)
	var all struct {
		Pipelines []struct {
			Pipeline, Table, Error string
			Status                 *struct{ Counts map[string]int }
		}
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &all), "%s", st)
	require.Len(t, all.Pipelines, 2+15+1+1, "orders, billing, 15 tenants, crm, broken")
	last := all.Pipelines[len(all.Pipelines)-1]
	require.Equal(t, "broken", last.Pipeline)
	require.Contains(t, last.Error, "does not exist")
	require.Contains(t, st.stderr, "pipeline broken: table missing.outbox:")
	one := runBin(t, bin, envWith(a.dsn), nil, "status", "--config", file, "--pipeline", "crm")
	requireOK(t, one)
	require.Regexp(t, `(?m)^pipeline crm\ntable\s+crm.outbox\npending\s+0\nprocessing\s+0\ndone\s+6$`, one.stdout)
	refused := runBin(t, bin, envWith(a.dsn), nil, "dead", "list", "--config", file)
	require.Equal(t, 2, refused.code, "%s", refused)
	require.Contains(t, refused.stderr, "has pipelines: name the table with --table")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := p.wait()
	requireOK(t, r)
	// stdout: orders and crm, each message once.
	byNS, seen := keysByNamespace(t, r.stdout)
	require.Equal(t, map[string]int{"orders": 4, "crm": 6}, byNS, "%s", r)
	for k, n := range seen {
		require.Equal(t, 1, n, "message %s printed %d times", k, n)
	}
	// The receiver: billing and every tenant, each message once.
	want := map[string]int{"billing": 4}
	for i := 1; i <= 20; i++ {
		n := 1 // created while running: one, then one more unless dropped
		if i <= 10 {
			n = 2
		}
		if i > 5 {
			n++
		}
		want["tenants."+tenant(i)] = n
	}
	got := map[string]int{}
	for k, n := range rcv.snapshot() {
		require.Equal(t, 1, n, "message %s received %d times", k, n)
		got[k[:max(strings.LastIndex(k, ":"), 0)]]++
	}
	require.Equal(t, want, got)
}
