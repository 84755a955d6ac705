package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testdb"
	"github.com/outboxd/outbox/internal/testio"
)

// cmdTimeout bounds every run of the binary, so a hung command fails its
// test instead of the whole package.
const cmdTimeout = 60 * time.Second

// secret is the password put into DSNs; it must never reach the output.
const secret = "hunter2secret"

// TestCLI builds outboxd once and runs every black-box test against the
// binary. The subtests share the build, which lives in this test's temporary
// directory until the last of them ends.
func TestCLI(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, tt := range []struct {
		name string
		fn   func(t *testing.T, bin string)
	}{
		{"MigrateCreatesTheDesignedTable", testMigrate},
		{"MigrateConcurrently", testMigrateConcurrently},
		{"MigrateDryRun", testMigrateDryRun},
		{"MigrateCurrentTableUnderLock", testMigrateCurrentTableUnderLock},
		{"Enqueue", testEnqueue},
		{"RunDrainToStdout", testRunDrainStdout},
		{"RunDrainBlocked", testRunDrainBlocked},
		{"RunDrainToHTTP", testRunDrainHTTP},
		{"RunIDNamespace", testRunIDNamespace},
		{"RunStopsOnSIGTERM", func(t *testing.T, bin string) { testRunStopsOnSignal(t, bin, syscall.SIGTERM) }},
		{"RunStopsOnSIGINT", func(t *testing.T, bin string) { testRunStopsOnSignal(t, bin, syscall.SIGINT) }},
		{"RunStopsMidPublish", testRunStopsMidPublish},
		{"RunRefusesRoleWithoutPrivileges", testRunRefusesRoleWithoutPrivileges},
		{"Status", testStatus},
		{"StatusLiveDispatchers", testStatusLiveDispatchers},
		{"Dead", testDead},
		{"DeadTop", testDeadTop},
		{"ShowAttemptHistory", testShowAttemptHistory},
		{"Purge", testPurge},
		{"DeadFilter", testDeadFilter},
		{"Replay", testReplay},
		{"BulkBadInput", testBulkBadInput},
		{"BadInput", testBadInput},
		{"HostileTableNames", testHostileTable},
		{"HelpAndVersion", testHelp},
		{"DemoOnGivenDatabase", testDemo},
		{"DemoOnThrowawayCluster", testDemoThrowaway},
		{"BenchDrain", testBenchDrain},
		{"BenchProducers", testBenchProducers},
		{"BenchLatency", testBenchLatency},
		{"BenchTenants", testBenchTenants},
		{"ShardLeases", testShardLeases},
		{"SnapshotCursors", testSnapshotCursors},
		{"Pipelines", testPipelines},
		{"PipelinesAcrossDatabases", testPipelinesAcrossDatabases},
		{"ListenerFlood", testListenerFlood},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, bin)
		})
	}
}

func buildBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "outboxd")
	// Generous: on a loaded machine the link alone can take minutes.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	// -buildvcs=auto: stamp the commit, as a plain go build does, whatever
	// GOFLAGS the machine's go env sets.
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildvcs=auto", "-o", bin, "./cmd/outboxd")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/outboxd:\n%s", out)
	return bin
}

// result is what one run of the binary left behind.
type result struct {
	args           []string
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("outboxd %q exited %d\nstdout:\n%s\nstderr:\n%s", r.args, r.code, r.stdout, r.stderr)
}

// proc is a started run of the binary.
type proc struct {
	t              *testing.T
	args           []string
	cmd            *exec.Cmd
	cancel         context.CancelFunc
	stdout, stderr *testio.Buffer
	exited         chan error
}

func start(t *testing.T, bin string, env []string, stdin io.Reader, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdin = stdin
	p := &proc{t: t, args: args, cmd: cmd, cancel: cancel, stdout: &testio.Buffer{}, stderr: &testio.Buffer{}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	// Children that keep the output pipes open (a throwaway cluster) must
	// not hang the test.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		require.NoError(t, err)
	}
	go func() { p.exited <- cmd.Wait() }()
	// A test that fails while the process runs still reaps it.
	t.Cleanup(func() {
		cancel()
		err := <-p.exited
		p.exited <- err
	})
	return p
}

// wait waits for the process to exit on its own and returns its result.
func (p *proc) wait() result {
	p.t.Helper()
	err := <-p.exited
	p.exited <- err
	r := result{args: p.args, stdout: p.stdout.String(), stderr: p.stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		r.code = exitErr.ExitCode()
	default:
		require.FailNow(p.t, "outboxd did not exit by itself", "%v\n%s", err, r)
	}
	return r
}

func runBin(t *testing.T, bin string, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	return start(t, bin, env, stdin, args...).wait()
}

// cli runs the binary against one test schema, with OUTBOX_DSN set.
type cli struct {
	bin    string
	dsn    string
	schema string
	table  string
	env    []string
}

func newCLI(t *testing.T, bin string) *cli {
	t.Helper()
	dsn := testdb.DSN(t)
	schema := testdb.NewSchema(t)
	return &cli{bin: bin, dsn: dsn, schema: schema, table: schema + ".outbox", env: envWith(dsn)}
}

// envWith is the test's environment with OUTBOX_DSN set to dsn.
func envWith(dsn string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "OUTBOX_DSN=") })
	return append(env, "OUTBOX_DSN="+dsn)
}

func (c *cli) run(t *testing.T, args ...string) result {
	t.Helper()
	return runBin(t, c.bin, c.env, nil, args...)
}

func (c *cli) runStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runBin(t, c.bin, c.env, strings.NewReader(stdin), args...)
}

// ok runs a command that must succeed.
func (c *cli) ok(t *testing.T, args ...string) result {
	t.Helper()
	r := c.run(t, args...)
	requireOK(t, r)
	return r
}

func (c *cli) migrate(t *testing.T) {
	t.Helper()
	c.ok(t, "migrate", "--table", c.table)
}

// quoted is the outbox table's identifier for test SQL.
func (c *cli) quoted() string { return pgx.Identifier{c.schema, "outbox"}.Sanitize() }

func (c *cli) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := testdb.Pool(t).Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// uid reads the identity of the row with id.
func (c *cli) uid(t *testing.T, id int64) string {
	t.Helper()
	var uid string
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		"SELECT uid::text FROM "+c.quoted()+" WHERE id = $1", id).Scan(&uid))
	return uid
}

func (c *cli) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		"SELECT count(*) FROM "+c.quoted()+" WHERE "+where).Scan(&n))
	return n
}

// insert adds a pending message directly, returning its id.
func (c *cli) insert(t *testing.T, aggregateID, payload string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		"INSERT INTO "+c.quoted()+" (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'OrderCreated', $2) RETURNING id",
		aggregateID, payload).Scan(&id))
	return id
}

func (c *cli) statusOf(t *testing.T, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(), "SELECT status FROM "+c.quoted()+" WHERE id = $1", id).Scan(&s))
	return s
}

// snapshot sums up the table's whole content: row count, max id and a
// checksum of every row, so any change shows.
func (c *cli) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		`SELECT count(*)::text || '/' || coalesce(max(id), 0)::text || '/' || coalesce(md5(string_agg(o::text, ',' ORDER BY id)), '')
		 FROM `+c.quoted()+` AS o`).Scan(&s))
	return s
}

func requireOK(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, 0, r.code, "%s", r)
	requireNoPanic(t, r)
}

func requireNoPanic(t *testing.T, r result) {
	t.Helper()
	for _, s := range []string{r.stdout, r.stderr} {
		require.NotContains(t, s, "panic", "%s", r)
		require.NotContains(t, s, "goroutine ", "%s", r)
	}
}

// requireFailure checks the error contract: the exit code, nothing on
// stdout, and exactly one "outboxd: " line on stderr.
func requireFailure(t *testing.T, r result, code int) {
	t.Helper()
	require.Equal(t, code, r.code, "%s", r)
	require.Empty(t, r.stdout, "%s", r)
	require.True(t, strings.HasSuffix(r.stderr, "\n"), "%s", r)
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	require.Len(t, lines, 1, "%s", r)
	require.True(t, strings.HasPrefix(lines[0], "outboxd: "), "%s", r)
	requireNoDoubledPrefix(t, lines[0])
	requireNoPanic(t, r)
}

// requireNoDoubledPrefix fails when an error line names one layer twice in
// a row ("outbox: outbox: ", "httpsink: httpsink: "): each layer adds its
// prefix once and leaves the text it wraps as it is.
func requireNoDoubledPrefix(t *testing.T, line string) {
	t.Helper()
	parts := strings.Split(line, ": ")
	for i := 1; i < len(parts); i++ {
		require.False(t, parts[i] == parts[i-1] && !strings.ContainsAny(parts[i], " \"'"), "doubled prefix %q: %s", parts[i], line)
	}
}

// withUser returns dsn connecting as user with password.
func withUser(t *testing.T, dsn, user, password string) string {
	t.Helper()
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.User = url.UserPassword(user, password)
		return u.String()
	}
	return dsn + " user=" + user + " password=" + password
}

// withParam returns dsn with one more connection parameter (pgx sends
// unknown ones to the server as run-time settings).
func withParam(t *testing.T, dsn, key, value string) string {
	t.Helper()
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " " + key + "=" + value
}

// jsonLines parses stdout as JSON lines, failing on any other line.
func jsonLines(t *testing.T, stdout string) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	for line := range strings.Lines(stdout) {
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(line), &m), "stdout line %q is not a JSON object", line)
		out = append(out, m)
	}
	return out
}

func keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func int64Of(t *testing.T, raw json.RawMessage) int64 {
	t.Helper()
	var n int64
	require.NoError(t, json.Unmarshal(raw, &n), "%s", raw)
	return n
}

func stringOf(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var s string
	require.NoError(t, json.Unmarshal(raw, &s), "%s", raw)
	return s
}

var idLine = regexp.MustCompile(`^[0-9]+\n$`)

// enqueue runs `outboxd enqueue` and returns the printed id.
func (c *cli) enqueue(t *testing.T, aggregateID, payload string) int64 {
	t.Helper()
	r := c.ok(t, "enqueue", "--table", c.table, "--aggregate-type", "order", "--aggregate-id", aggregateID,
		"--event-type", "OrderCreated", "--payload", payload)
	require.Regexp(t, idLine, r.stdout)
	id, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	require.NoError(t, err)
	return id
}

func testMigrate(t *testing.T, bin string) {
	c := newCLI(t, bin)
	for range 2 {
		r := c.ok(t, "migrate", "--table", c.table)
		require.Equal(t, "migrated table "+c.table+"\n", r.stdout)
	}
	ctx := context.Background()
	pool := testdb.Pool(t)

	type column struct{ name, typ, identity, nullable, def string }
	rows, err := pool.Query(ctx, `SELECT column_name, data_type, coalesce(identity_generation, ''), is_nullable, coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outbox' ORDER BY ordinal_position`, c.schema)
	require.NoError(t, err)
	cols, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (column, error) {
		var col column
		err := row.Scan(&col.name, &col.typ, &col.identity, &col.nullable, &col.def)
		return col, err
	})
	require.NoError(t, err)
	type want struct{ name, typ, identity, nullable string }
	got := make([]want, len(cols))
	for i, col := range cols {
		got[i] = want{col.name, col.typ, col.identity, col.nullable}
	}
	require.Equal(t, []want{
		{"id", "bigint", "ALWAYS", "NO"},
		{"aggregate_type", "text", "", "NO"},
		{"aggregate_id", "text", "", "NO"},
		{"event_type", "text", "", "NO"},
		{"payload", "jsonb", "", "NO"},
		{"created_at", "timestamp with time zone", "", "NO"},
		{"status", "text", "", "NO"},
		{"available_at", "timestamp with time zone", "", "NO"},
		{"attempts", "integer", "", "NO"},
		{"lease_owner", "text", "", "YES"},
		{"lease_until", "timestamp with time zone", "", "YES"},
		{"lease_version", "bigint", "", "NO"},
		{"last_error", "text", "", "YES"},
		{"done_at", "timestamp with time zone", "", "YES"},
		// Added by migration 002: producer headers (trace context).
		{"headers", "jsonb", "", "YES"},
		// Added by migration 006: each message's identity. Nullable: rows
		// from before it have none.
		{"uid", "uuid", "", "YES"},
	}, got)
	defaults := map[string]string{}
	for _, col := range cols {
		defaults[col.name] = col.def
	}
	require.Equal(t, "'pending'::text", defaults["status"])
	require.Equal(t, "0", defaults["attempts"])
	require.Equal(t, "0", defaults["lease_version"])
	require.Equal(t, "now()", defaults["created_at"])
	require.Equal(t, "gen_random_uuid()", defaults["uid"])

	var checks []string
	rows, err = pool.Query(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'c'`, c.quoted())
	require.NoError(t, err)
	checks, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, checks, 2, "status and non-empty names")
	slices.Sort(checks)
	require.Equal(t, "CHECK (((aggregate_type <> ''::text) AND (aggregate_id <> ''::text) AND (event_type <> ''::text)))", checks[0])
	for _, s := range []string{"status", "'pending'", "'processing'", "'done'", "'dead'"} {
		require.Contains(t, checks[1], s)
	}
	_, err = pool.Exec(ctx, "INSERT INTO "+c.quoted()+" (aggregate_type, aggregate_id, event_type, payload, status) VALUES ('o', '1', 'E', '{}', 'lost')")
	require.Error(t, err, "the status CHECK must refuse an unknown status")

	rows, err = pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'outbox' ORDER BY indexname`, c.schema)
	require.NoError(t, err)
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"outbox_aggregate_head", "outbox_dead", "outbox_done", "outbox_leased", "outbox_pkey", "outbox_ready"}, indexes)
}

func testMigrateConcurrently(t *testing.T, bin string) {
	c := newCLI(t, bin)
	table := c.schema + ".fresh"
	a := start(t, bin, c.env, nil, "migrate", "--table", table)
	b := start(t, bin, c.env, nil, "migrate", "--table", table)
	requireOK(t, a.wait())
	requireOK(t, b.wait())
	var n int
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		`SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'fresh'`, c.schema).Scan(&n))
	require.Equal(t, 6, n, "primary key, ready, leased, aggregate head, dead and done indexes")
}

func testEnqueue(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	payloadOf := func(id int64) (aggregateType, aggregateID, eventType, payload string) {
		require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
			"SELECT aggregate_type, aggregate_id, event_type, payload::text FROM "+c.quoted()+" WHERE id = $1", id).
			Scan(&aggregateType, &aggregateID, &eventType, &payload))
		return
	}

	inline := c.enqueue(t, "order-1", `{"total": 10, "items": ["a", "b"]}`)
	at, aid, et, p := payloadOf(inline)
	require.Equal(t, "order", at)
	require.Equal(t, "order-1", aid)
	require.Equal(t, "OrderCreated", et)
	require.JSONEq(t, `{"total": 10, "items": ["a", "b"]}`, p)

	r := c.runStdin(t, `{"from": "stdin", "n": [1, 2, 3]}`,
		"enqueue", "--table", c.table, "--aggregate-type", "invoice", "--aggregate-id", "inv-9", "--event-type", "InvoiceSent", "--payload", "-")
	requireOK(t, r)
	require.Regexp(t, idLine, r.stdout)
	fromStdin, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	require.NoError(t, err)
	at, aid, et, p = payloadOf(fromStdin)
	require.Equal(t, []string{"invoice", "inv-9", "InvoiceSent"}, []string{at, aid, et})
	require.JSONEq(t, `{"from": "stdin", "n": [1, 2, 3]}`, p)

	file := filepath.Join(t.TempDir(), "payload.json")
	require.NoError(t, os.WriteFile(file, []byte("{\n  \"from\": \"file\",\n  \"ok\": true\n}\n"), 0o600))
	fromFile := c.enqueue(t, "order-2", "@"+file)
	_, _, _, p = payloadOf(fromFile)
	require.JSONEq(t, `{"from": "file", "ok": true}`, p)

	require.Less(t, inline, fromStdin)
	require.Less(t, fromStdin, fromFile)
	require.Equal(t, 3, c.count(t, "status = 'pending'"))
}

// testRunDrainBlocked: an ordered drain that leaves messages behind a dead
// head exits 3 with one line naming them; unordered, the dead message
// blocks nothing and the drain exits 0.
func testRunDrainBlocked(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	dead := c.insert(t, "a", `{"n": 1}`)
	c.insert(t, "a", `{"n": 2}`)
	c.insert(t, "a", `{"n": 3}`)
	other := c.insert(t, "b", `{"n": 4}`)
	c.exec(t, "UPDATE "+c.quoted()+" SET status = 'dead', last_error = 'refused' WHERE id = $1", dead)

	r := c.run(t, "run", "--drain", "--ordered", "--sink", "null:", "--table", c.table)
	require.Equal(t, 3, r.code, "%s", r)
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	last := lines[len(lines)-1]
	require.Equal(t, fmt.Sprintf(`outboxd: drained, but 2 messages of 1 aggregate wait behind a dead message (first: aggregate "a" behind id %d); retry or skip it (outboxd dead retry %d, outboxd dead skip %d)`,
		dead, dead, dead), last, "%s", r)
	require.Equal(t, "done", c.statusOf(t, other))
	require.Equal(t, 2, c.count(t, "status = 'pending'"))

	c.ok(t, "migrate", "--table", c.table, "--shards", "2")
	r = c.run(t, "run", "--drain", "--lease-mode", "shard", "--ordered", "--sink", "null:", "--table", c.table)
	require.Equal(t, 3, r.code, "shard leases deliver in order too: %s", r)
	require.Equal(t, 2, c.count(t, "status = 'pending'"))

	c.ok(t, "run", "--drain", "--lease-mode", "shard", "--sink", "null:", "--table", c.table)
	require.Zero(t, c.count(t, "status = 'pending'"), "unordered, a dead message blocks nothing")
}

func testRunDrainStdout(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	payloads := map[int64]string{}
	for i := range 5 {
		p := fmt.Sprintf(`{"n": %d, "note": "<&> \u00e9"}`, i)
		payloads[c.enqueue(t, fmt.Sprintf("agg-%d", i%2), p)] = p
	}

	r := c.ok(t, "run", "--drain", "--sink", "stdout:", "--table", c.table)
	lines := jsonLines(t, r.stdout)
	require.Len(t, lines, len(payloads), "%s", r)
	seen := map[int64]bool{}
	for _, m := range lines {
		for _, k := range []string{"id", "aggregate_type", "aggregate_id", "event_type", "attempt", "fencing_token", "payload"} {
			require.Contains(t, m, k)
		}
		id := int64Of(t, m["id"])
		require.Contains(t, payloads, id)
		require.False(t, seen[id], "message %d delivered twice", id)
		seen[id] = true
		require.Equal(t, "order", stringOf(t, m["aggregate_type"]))
		require.Regexp(t, `^agg-[01]$`, stringOf(t, m["aggregate_id"]))
		require.Equal(t, "OrderCreated", stringOf(t, m["event_type"]))
		require.Equal(t, int64(1), int64Of(t, m["attempt"]))
		require.GreaterOrEqual(t, int64Of(t, m["fencing_token"]), int64(1))
		require.JSONEq(t, payloads[id], string(m["payload"]))
	}
	require.NotEmpty(t, r.stderr, "the logs go to stderr")
	require.Contains(t, r.stderr, "summary")
	require.Equal(t, len(payloads), c.count(t, "status = 'done' AND done_at IS NOT NULL"))
}

func testRunDrainHTTP(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	payloads := map[string]string{}
	for i := range 3 {
		p := fmt.Sprintf(`{"n":%d}`, i)
		payloads[strconv.FormatInt(c.enqueue(t, "agg", p), 10)] = p
	}
	rejected := c.enqueue(t, "agg", `{"reject":true}`)
	var (
		mu       sync.Mutex
		received = map[string][]string{}
		badAuth  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if user, pass, ok := r.BasicAuth(); !ok || user != "hook" || pass != secret {
			badAuth++
		}
		key := r.Header.Get("Outbox-Row-Id")
		received[key] = append(received[key], string(body))
		if strings.Contains(string(body), "reject") {
			http.Error(w, "unprocessable", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	sinkURL, err := url.Parse(srv.URL + "/hook")
	require.NoError(t, err)
	sinkURL.User = url.UserPassword("hook", secret)

	r := c.ok(t, "run", "--drain", "--sink", sinkURL.String(), "--table", c.table)
	require.Empty(t, r.stdout)
	require.NotContains(t, r.stderr, secret)
	mu.Lock()
	defer mu.Unlock()
	require.Zero(t, badAuth, "the sink URL's credentials go out as basic auth")
	require.Len(t, received, len(payloads)+1)
	for id, p := range payloads {
		require.Len(t, received[id], 1, "one request for row %s", id)
		require.JSONEq(t, p, received[id][0])
	}
	require.Equal(t, len(payloads), c.count(t, "status = 'done'"))
	// A 400 is permanent: the message goes dead at once, and its recorded
	// error does not carry the sink's password.
	require.Len(t, received[strconv.FormatInt(rejected, 10)], 1)
	var lastError string
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		"SELECT last_error FROM "+c.quoted()+" WHERE id = $1 AND status = 'dead'", rejected).Scan(&lastError))
	require.Contains(t, lastError, "400")
	require.NotContains(t, lastError, secret)
}

func testRunStopsOnSignal(t *testing.T, bin string, sig os.Signal) {
	c := newCLI(t, bin)
	c.migrate(t)
	id := c.enqueue(t, "agg", `{"n":1}`)
	p := start(t, bin, c.env, nil, "run", "--table", c.table, "--poll-interval", "200ms")
	// Idle: the one message is delivered and nothing else is claimable.
	require.Eventually(t, func() bool {
		return c.count(t, "status = 'done'") == 1 && strings.Contains(p.stdout.String(), "\n")
	}, 30*time.Second, 20*time.Millisecond, "stderr:\n%s", p.stderr.String())
	sent := time.Now()
	require.NoError(t, p.cmd.Process.Signal(sig))
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(5 * time.Second):
		require.FailNow(t, "outboxd run did not stop within 5s of the signal", "stderr:\n%s", p.stderr.String())
	}
	r := p.wait()
	requireOK(t, r)
	require.Less(t, time.Since(sent), 5*time.Second)
	lines := jsonLines(t, r.stdout)
	require.Len(t, lines, 1)
	require.Equal(t, id, int64Of(t, lines[0]["id"]))
	require.Equal(t, 0, c.count(t, "status = 'processing' OR lease_owner IS NOT NULL"))
}

// hangingReceiver is a webhook endpoint that holds each request until the
// client gives up or the test ends, then answers 503; arrived receives when
// a request is in.
func hangingReceiver(t *testing.T) (hook string, arrived <-chan struct{}) {
	t.Helper()
	in := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case in <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv.URL, in
}

// waitArrived waits up to 30s for the process's publish to reach a
// hangingReceiver.
func (p *proc) waitArrived(t *testing.T, arrived <-chan struct{}) {
	t.Helper()
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		require.FailNow(t, "no publish arrived", "stderr:\n%s", p.stderr.String())
	}
}

// testRunStopsMidPublish stops run while a publish hangs: the publish is
// cut at --publish-timeout, and the message goes back to pending rather than
// staying leased to a process that is gone.
func testRunStopsMidPublish(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	id := c.enqueue(t, "agg", `{"n":1}`)
	hook, arrived := hangingReceiver(t)
	p := start(t, bin, c.env, nil, "run", "--table", c.table, "--sink", hook, "--publish-timeout", "1s", "--lease", "30s")
	p.waitArrived(t, arrived)
	require.Equal(t, "processing", c.statusOf(t, id))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.exited:
		p.exited <- err
	case <-time.After(5 * time.Second):
		require.FailNow(t, "outboxd run did not stop within 5s of SIGTERM", "stderr:\n%s", p.stderr.String())
	}
	requireOK(t, p.wait())
	require.Equal(t, 1, c.count(t, fmt.Sprintf("id = %d AND status = 'pending' AND lease_owner IS NULL AND lease_until IS NULL", id)))
}

// An idle dispatcher is listed by status, with the fields --json
// documents; once it stops, none is.
func testStatusLiveDispatchers(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	r := c.ok(t, "status", "--table", c.table)
	require.Regexp(t, `(?m)^dispatchers\s+none running \(none reported within three beats\)$`, r.stdout)
	r = c.ok(t, "status", "--json", "--table", c.table)
	require.Contains(t, r.stdout, `"dispatchers": []`)

	c.enqueue(t, "agg", `{"n":1}`)
	p := start(t, bin, c.env, nil, "run", "--table", c.table, "--sink", "null:", "--owner", "cli-idle", "--lease", "3s")
	var live []map[string]json.RawMessage
	require.Eventually(t, func() bool {
		r := c.ok(t, "status", "--json", "--table", c.table)
		var top struct {
			Dispatchers []map[string]json.RawMessage `json:"dispatchers"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &top), "%s", r)
		live = top.Dispatchers
		return len(live) == 1 && string(live[0]["delivered_1m"]) == "1"
	}, 20*time.Second, 100*time.Millisecond, "stderr:\n%s", p.stderr.String())
	require.Equal(t, []string{"delivered_1m", "destinations", "host", "in_flight", "last_seen", "lease_mode", "owner", "sink_paused", "started_at", "version"}, keys(live[0]))
	require.JSONEq(t, `"cli-idle"`, string(live[0]["owner"]))
	require.JSONEq(t, `"row"`, string(live[0]["lease_mode"]))
	require.JSONEq(t, `0`, string(live[0]["in_flight"]))
	r = c.ok(t, "status", "--table", c.table)
	require.Regexp(t, `(?m)^dispatchers \(1\)\s+cli-idle on \S+, \S+, row leases, 0 in flight, 1 delivered in the last minute, seen \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`, r.stdout)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	requireOK(t, p.wait())
	r = c.ok(t, "status", "--table", c.table)
	require.Regexp(t, `(?m)^dispatchers\s+none running`, r.stdout, "a dispatcher that stops deletes its row")
}

func testStatus(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	statusJSON := func() (map[string]json.RawMessage, map[string]int64, map[string]int64) {
		r := c.ok(t, "status", "--json", "--table", c.table)
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &top), "%s", r)
		require.Equal(t, []string{"attempts", "blocked", "counts", "destinations", "dispatchers", "done_estimated", "expired_leases", "oldest_pending_age_seconds", "pauses"}, keys(top))
		var counts, attempts map[string]int64
		require.NoError(t, json.Unmarshal(top["counts"], &counts))
		require.Equal(t, []string{"dead", "done", "pending", "processing"}, keys(counts))
		require.NoError(t, json.Unmarshal(top["attempts"], &attempts))
		return top, counts, attempts
	}

	top, counts, attempts := statusJSON()
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 0, "dead": 0}, counts)
	require.Equal(t, "null", string(top["oldest_pending_age_seconds"]))
	require.Empty(t, attempts)

	ids := make([]int64, 6)
	for i := range ids {
		ids[i] = c.enqueue(t, fmt.Sprintf("agg-%d", i), fmt.Sprintf(`{"n":%d}`, i))
	}
	q := c.quoted()
	c.exec(t, "UPDATE "+q+" SET created_at = now() - interval '1 hour' WHERE id = $1", ids[0])
	c.exec(t, "UPDATE "+q+" SET attempts = 2 WHERE id = $1", ids[1])
	c.exec(t, "UPDATE "+q+" SET status = 'processing', attempts = 1, lease_owner = 'gone', lease_version = 1, lease_until = now() - interval '1 minute' WHERE id = $1", ids[2])
	c.exec(t, "UPDATE "+q+" SET status = 'processing', attempts = 1, lease_owner = 'live', lease_version = 1, lease_until = now() + interval '1 minute' WHERE id = $1", ids[3])
	c.exec(t, "UPDATE "+q+" SET status = 'done', attempts = 1, done_at = now() WHERE id = $1", ids[4])
	c.exec(t, "UPDATE "+q+" SET status = 'dead', attempts = 7, last_error = 'boom' WHERE id = $1", ids[5])

	top, counts, attempts = statusJSON()
	require.Equal(t, map[string]int64{"pending": 2, "processing": 2, "done": 1, "dead": 1}, counts)
	require.Equal(t, map[string]int64{"0": 1, "1": 2, "2": 1}, attempts)
	require.Equal(t, "1", string(top["expired_leases"]))
	var age float64
	require.NoError(t, json.Unmarshal(top["oldest_pending_age_seconds"], &age))
	require.InDelta(t, 3600, age, 60)

	require.JSONEq(t, `{"aggregates": 0, "messages": 0}`, string(top["blocked"]), "the dead message has nothing behind it")
	r := c.ok(t, "status", "--table", c.table)
	for _, re := range []string{`(?m)^pending\s+2$`, `(?m)^processing\s+2$`, `(?m)^done\s+1$`, `(?m)^dead\s+1$`, `(?m)^expired leases\s+1$`, `(?m)^oldest pending age\s+1h`} {
		require.Regexp(t, re, r.stdout)
	}
	require.NotContains(t, r.stdout, "behind a dead head")

	behind := c.insert(t, "agg-5", `{"n":6}`) // after the dead one, in its aggregate
	top, _, _ = statusJSON()
	require.JSONEq(t, fmt.Sprintf(`{"aggregates": 1, "messages": 1, "list": [{"aggregate_id": "agg-5", "dead_id": %d, "waiting": 1}]}`, ids[5]),
		string(top["blocked"]), "the aggregates are listed")
	r = c.ok(t, "status", "--table", c.table)
	require.Regexp(t, `(?m)^behind a dead head\s+1 message of 1 aggregate \(delivered in order, they wait for dead retry or skip\)$`, r.stdout)
	require.Regexp(t, fmt.Sprintf(`(?m)^\s+aggregate agg-5: 1 waiting behind dead message %d$`, ids[5]), r.stdout)
	c.exec(t, "DELETE FROM "+q+" WHERE id = $1", behind)

	c.exec(t, "UPDATE "+q+" SET status = 'done', done_at = now(), lease_owner = NULL, lease_until = NULL WHERE status IN ('pending', 'processing')")
	top, counts, attempts = statusJSON()
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 5, "dead": 1}, counts)
	require.Equal(t, "null", string(top["oldest_pending_age_seconds"]))
	require.Equal(t, "0", string(top["expired_leases"]))
	require.Empty(t, attempts)
	r = c.ok(t, "status", "--table", c.table)
	require.Regexp(t, `(?m)^oldest pending age\s+none undelivered$`, r.stdout)
}

// dead top groups the dead letters by event type and error shape and
// prints, for the largest groups, the command that retries each; the
// command works as printed (through a shell).
func testDeadTop(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	r := c.ok(t, "dead", "top", "--table", c.table)
	require.Equal(t, "no dead messages\n", r.stdout)

	for i := range 5 {
		id := c.insert(t, fmt.Sprintf("agg-%d", i), `{}`)
		text := fmt.Sprintf("POST https://hooks.example.com/o/%d: 503 Service Unavailable", i)
		if i == 4 {
			text = "receiver's answer: 422 total isn't a number"
		}
		c.exec(t, "UPDATE "+c.quoted()+" SET status = 'dead', attempts = 5, last_error = $2 WHERE id = $1", id, text)
	}
	r = c.ok(t, "dead", "top", "--table", c.table)
	require.Regexp(t, `(?m)^COUNT\s+EVENT\s+ERROR SHAPE\s+NEWEST$`, r.stdout)
	require.Regexp(t, `(?m)^4\s+OrderCreated\s+POST <url>: <n> Service Unavailable\s+\d+$`, r.stdout)
	require.Regexp(t, `(?m)^1\s+OrderCreated\s+receiver's answer: <n> total isn't a number\s+\d+$`, r.stdout)
	require.Contains(t, r.stdout, "\n2 groups. Retry or skip a group (preview with --dry-run):\n")
	require.Contains(t, r.stdout, "  outboxd dead retry --filter status=dead --filter event_type=OrderCreated --filter 'error=Service Unavailable'\n")
	require.Contains(t, r.stdout, `  outboxd dead retry --filter status=dead --filter event_type=OrderCreated --filter 'error=total isn'\''t a number'`+"\n")

	// The printed command, run by a shell as an operator would paste it.
	line := regexp.MustCompile(`(?m)^  outboxd (dead retry .*'error=total.*)$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, line)
	sh := exec.Command("sh", "-c", bin+" "+line[1]+" --dry-run --table "+c.table)
	sh.Env = c.env
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "would retry 1 messages\n", string(out), "the group's filter selects the group")

	r = c.ok(t, "dead", "top", "--json", "--limit", "1", "--scan", "2", "--table", c.table)
	var top struct {
		Scanned int64 `json:"scanned"`
		More    bool  `json:"more"`
		Groups  []map[string]json.RawMessage
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &top), "%s", r)
	require.EqualValues(t, 2, top.Scanned)
	require.True(t, top.More)
	require.Len(t, top.Groups, 1)
	require.Equal(t, []string{"count", "event_type", "filter", "newest_id", "oldest_id", "sample", "shape"}, keys(top.Groups[0]))

	r = c.run(t, "dead", "top", "--limit", "0", "--table", c.table)
	require.Equal(t, 2, r.code, "%s", r)
	require.Contains(t, r.stderr, "--limit must be positive")
}

// A message whose receiver failed three times: `show` prints its attempt
// history, one line per attempt, the newest first; --json prints the
// message API's shape.
func testShowAttemptHistory(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	id := c.enqueue(t, "agg", `{"n":1}`)
	var mu sync.Mutex
	codes := []int{http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusTooManyRequests}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if len(codes) > 0 {
			code := codes[0]
			codes = codes[1:]
			http.Error(w, "not now", code)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c.ok(t, "run", "--drain", "--sink", srv.URL, "--owner", "relay-7", "--retry-base", "1ms", "--retry-cap", "5ms", "--table", c.table)

	r := c.ok(t, "show", strconv.FormatInt(id, 10), "--table", c.table)
	require.Regexp(t, `(?m)^status\s+done$`, r.stdout)
	require.Contains(t, r.stdout, "\nattempt history (3, newest first)\n")
	require.Regexp(t, `(?m)^AT\s+ATTEMPT\s+OUTCOME\s+STATUS\s+TOOK\s+DISPATCHER\s+ERROR$`, r.stdout)
	lines := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\s+(\d)\s+retry\s+(\d+)\s+\S+\s+relay-7\s+retryable: httpsink: POST .*: HTTP (\d+) .*$`).FindAllStringSubmatch(r.stdout, -1)
	require.Len(t, lines, 3, "%s", r.stdout)
	for i, want := range [][]string{{"3", "429"}, {"2", "502"}, {"1", "503"}} {
		require.Equal(t, want, []string{lines[i][1], lines[i][2]}, "newest first")
		require.Equal(t, lines[i][2], lines[i][3], "the status is the receiver's")
	}

	r = c.ok(t, "show", strconv.FormatInt(id, 10), "--json", "--table", c.table)
	var m struct {
		ID      int64                        `json:"id"`
		History []map[string]json.RawMessage `json:"history"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &m), "%s", r)
	require.Equal(t, id, m.ID)
	require.Len(t, m.History, 3)
	require.Equal(t, []string{"at", "attempt", "dispatcher", "duration_ms", "error", "outcome", "status"}, keys(m.History[0]))
	require.JSONEq(t, "429", string(m.History[0]["status"]))

	// A message delivered at once has no history; an unknown id and a bad
	// one are one line each.
	other := c.enqueue(t, "agg", `{"n":2}`)
	c.ok(t, "run", "--drain", "--sink", srv.URL, "--table", c.table)
	r = c.ok(t, "show", strconv.FormatInt(other, 10), "--table", c.table)
	require.Contains(t, r.stdout, "\nno failed attempts recorded\n")
	r = c.run(t, "show", "999999", "--table", c.table)
	require.Equal(t, 1, r.code, "%s", r)
	require.Equal(t, "outboxd: no message 999999 in "+c.table+"\n", r.stderr)
	r = c.run(t, "show", "abc", "--table", c.table)
	require.Equal(t, 2, r.code, "%s", r)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "%s", r.stderr)

	// A message waiting for a later attempt says when, and retry-now makes
	// it due at once (audited); a second time it does not wait.
	waiting := c.insert(t, "agg-w", `{"n":3}`)
	c.exec(t, "UPDATE "+c.quoted()+" SET attempts = 1, available_at = now() + interval '1 hour' WHERE id = $1", waiting)
	w := strconv.FormatInt(waiting, 10)
	r = c.ok(t, "show", w, "--table", c.table)
	require.Regexp(t, `(?m)^next attempt\s+\d{4}-\d\d-\d\dT\S+Z \(outboxd retry-now `+w+` makes it due now\)$`, r.stdout)
	r = c.ok(t, "retry-now", w, "--table", c.table)
	require.Contains(t, r.stdout, "made 1 message(s) due now")
	require.NotContains(t, c.ok(t, "show", w, "--table", c.table).stdout, "next attempt")
	r = c.run(t, "retry-now", w, "--table", c.table)
	require.Equal(t, 1, r.code, "%s", r)
	require.Equal(t, "outboxd: not waiting for a later attempt (being delivered, delivered, dead, due already, or not found): "+w+"\n", r.stderr)
	r = c.run(t, "retry-now", "--table", c.table)
	require.Equal(t, 2, r.code, "%s", r)
}

func testDead(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	r := c.ok(t, "dead", "list", "--json", "--table", c.table)
	require.Equal(t, "[]", strings.TrimSpace(r.stdout))

	ids := make([]int64, 4)
	for i := range ids {
		ids[i] = c.insert(t, fmt.Sprintf("agg-%d", i), fmt.Sprintf(`{"n": %d}`, i))
	}
	c.exec(t, "UPDATE "+c.quoted()+` SET status = 'dead', attempts = 5, lease_version = 5, lease_owner = NULL, lease_until = NULL,
		last_error = 'permanent: HTTP 400 for message ' || id WHERE id = ANY($1)`, ids[:3])

	r = c.ok(t, "dead", "list", "--json", "--table", c.table)
	var list []map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list), "%s", r)
	require.Len(t, list, 3)
	for i, m := range list {
		require.Equal(t, []string{"aggregate_id", "aggregate_type", "attempts", "created_at", "event_type", "id", "last_error", "lease_version", "payload", "uid"}, keys(m))
		require.Equal(t, ids[i], int64Of(t, m["id"]))
		require.Equal(t, c.uid(t, ids[i]), stringOf(t, m["uid"]))
		require.Equal(t, "order", stringOf(t, m["aggregate_type"]))
		require.Equal(t, fmt.Sprintf("agg-%d", i), stringOf(t, m["aggregate_id"]))
		require.Equal(t, "OrderCreated", stringOf(t, m["event_type"]))
		require.JSONEq(t, fmt.Sprintf(`{"n": %d}`, i), string(m["payload"]))
		require.Equal(t, int64(5), int64Of(t, m["attempts"]))
		require.Equal(t, int64(5), int64Of(t, m["lease_version"]))
		require.Equal(t, fmt.Sprintf("permanent: HTTP 400 for message %d", ids[i]), stringOf(t, m["last_error"]))
		created, err := time.Parse(time.RFC3339Nano, stringOf(t, m["created_at"]))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), created, time.Minute)
	}
	r = c.ok(t, "dead", "list", "--table", c.table)
	for _, id := range ids[:3] {
		require.Contains(t, r.stdout, fmt.Sprintf("permanent: HTTP 400 for message %d", id))
	}

	r = c.ok(t, "dead", "retry", "--table", c.table, strconv.FormatInt(ids[0], 10))
	require.Equal(t, fmt.Sprintf("retried 1 message(s): %d\n", ids[0]), r.stdout)
	require.Equal(t, 1, c.count(t, fmt.Sprintf("id = %d AND status = 'pending' AND attempts = 0 AND available_at <= now()", ids[0])))
	require.Equal(t, "dead", c.statusOf(t, ids[1]))

	r = c.ok(t, "dead", "skip", "--table", c.table, strconv.FormatInt(ids[1], 10))
	require.Equal(t, fmt.Sprintf("skipped 1 message(s): %d\n", ids[1]), r.stdout)
	require.Equal(t, 1, c.count(t, fmt.Sprintf("id = %d AND status = 'done' AND done_at IS NOT NULL AND last_error IS NOT NULL", ids[1])))

	// ids[3] is pending, not dead: nothing moves and the id is named.
	before := c.snapshot(t)
	for _, verb := range []string{"retry", "skip"} {
		r = c.run(t, "dead", verb, "--table", c.table, strconv.FormatInt(ids[3], 10))
		require.Equal(t, 1, r.code, "%s", r)
		require.Regexp(t, `^outboxd: .*\b`+strconv.FormatInt(ids[3], 10)+`\b.*\n$`, r.stderr)
		requireNoPanic(t, r)
	}
	require.Equal(t, before, c.snapshot(t))

	for _, args := range [][]string{
		{"dead"},
		{"dead", "retry"},
		{"dead", "skip"},
		{"dead", "retry", "--all", "1"},
		{"dead", "skip", "--all", "--filter", "event_type=A"},
		{"dead", "skip", "--filter", "status=dead"},
		{"dead", "retry", "abc"},
		{"dead", "revive", "1"},
	} {
		requireFailure(t, c.run(t, append(args, "--table", c.table)...), 2)
	}
	require.Equal(t, before, c.snapshot(t))

	r = c.ok(t, "dead", "retry", "--all", "--table", c.table)
	require.Equal(t, fmt.Sprintf("retried 1 message(s): %d\n", ids[2]), r.stdout)
	require.Equal(t, "pending", c.statusOf(t, ids[2]))
	require.Equal(t, 0, c.count(t, "status = 'dead'"))
	r = c.ok(t, "dead", "list", "--json", "--table", c.table)
	require.Equal(t, "[]", strings.TrimSpace(r.stdout))
}

func testPurge(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	q := c.quoted()
	ids := make([]int64, 5)
	for i := range ids {
		ids[i] = c.insert(t, "agg", `{}`)
	}
	c.exec(t, "UPDATE "+q+" SET status = 'done', done_at = now() - interval '8 days' WHERE id = $1", ids[0])
	c.exec(t, "UPDATE "+q+" SET status = 'done', done_at = now() - interval '2 hours' WHERE id = $1", ids[1])
	c.exec(t, "UPDATE "+q+" SET status = 'done', done_at = now() WHERE id = $1", ids[2])
	// Old rows that are not done stay whatever their age.
	c.exec(t, "UPDATE "+q+" SET created_at = now() - interval '30 days', status = 'dead' WHERE id = $1", ids[3])
	c.exec(t, "UPDATE "+q+" SET created_at = now() - interval '30 days' WHERE id = $1", ids[4])

	remaining := func() []int64 {
		rows, err := testdb.Pool(t).Query(context.Background(), "SELECT id FROM "+q+" ORDER BY id")
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return got
	}

	r := c.ok(t, "purge", "--older-than", "7d", "--table", c.table)
	require.Contains(t, r.stdout, "purged 1 ")
	require.Equal(t, []int64{ids[1], ids[2], ids[3], ids[4]}, remaining())

	r = c.ok(t, "purge", "--older-than", "1h", "--table", c.table)
	require.Contains(t, r.stdout, "purged 1 ")
	require.Equal(t, []int64{ids[2], ids[3], ids[4]}, remaining())

	r = c.ok(t, "purge", "--older-than", "1h", "--batch", "1", "--table", c.table)
	require.Contains(t, r.stdout, "purged 0 ")
	require.Equal(t, []int64{ids[2], ids[3], ids[4]}, remaining())

	for _, args := range [][]string{
		{"purge"},
		{"purge", "--older-than", "yesterday"},
		{"purge", "--older-than", "-1h"},
		{"purge", "--older-than", "0s"},
		{"purge", "--all", "--older-than", "1h"},
		{"purge", "--older-than", "1h", "--batch", "0"},
	} {
		requireFailure(t, c.run(t, append(args, "--table", c.table)...), 2)
	}
	require.Equal(t, []int64{ids[2], ids[3], ids[4]}, remaining())
}

func testBadInput(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	for i := range 3 {
		c.insert(t, fmt.Sprintf("agg-%d", i), `{"keep": true}`)
	}
	missing := c.schema + ".missing"
	unreachable := "postgres://u:" + secret + "@127.0.0.1:1/x"
	wrongRole := withUser(t, c.dsn, "outboxd_no_such_role", secret)
	enqueue := []string{"enqueue", "--table", c.table, "--aggregate-type", "order", "--aggregate-id", "1", "--event-type", "E"}
	runDrain := []string{"run", "--drain", "--table", c.table}

	for _, tt := range []struct {
		name    string
		args    []string
		env     []string
		stdin   string
		code    int
		mention string
	}{
		{name: "InvalidDSN", args: []string{"status", "--table", c.table, "--dsn", "host=x port=notaport"}, code: 2, mention: "DSN"},
		{name: "InvalidDSNWithPassword", args: []string{"migrate", "--table", c.table, "--dsn", "host=x password=" + secret + " port=notaport"}, code: 2, mention: "DSN"},
		{name: "InvalidURLDSNWithPassword", args: []string{"status", "--table", c.table, "--dsn", "postgres://u:" + secret + "@127.0.0.1:notaport/x"}, code: 2, mention: "DSN"},
		{name: "UnreachableServer", args: []string{"status", "--table", c.table, "--dsn", unreachable}, code: 1},
		{name: "UnreachableServerFromEnv", args: []string{"migrate", "--table", c.table}, env: envWith(unreachable), code: 1},
		{name: "UnknownRoleWithPassword", args: append(slices.Clone(runDrain), "--dsn", wrongRole), code: 1, mention: "outboxd_no_such_role"},
		{name: "UnknownSinkScheme", args: append(slices.Clone(runDrain), "--sink", "ftp://example.invalid/x"), code: 2, mention: "ftp"},
		{name: "SinkNotAURL", args: append(slices.Clone(runDrain), "--sink", "stdot"), code: 2, mention: "--sink"},
		{name: "NegativeWorkers", args: append(slices.Clone(runDrain), "--workers", "-1"), code: 2, mention: "--workers"},
		{name: "NegativeBatch", args: append(slices.Clone(runDrain), "--batch", "-1"), code: 2, mention: "--batch"},
		{name: "TinyLease", args: append(slices.Clone(runDrain), "--lease", "1ms"), code: 2, mention: "--lease"},
		{name: "NegativeFetchCooldown", args: append(slices.Clone(runDrain), "--fetch-cooldown", "-1s"), code: 2, mention: "--fetch-cooldown"},
		{name: "PublishTimeoutOverHalfLease", args: append(slices.Clone(runDrain), "--publish-timeout", "40s", "--lease", "60s"), code: 2, mention: "--publish-timeout"},
		{name: "BadDuration", args: append(slices.Clone(runDrain), "--lease", "soon"), code: 2, mention: "soon"},
		{name: "BadLogLevel", args: append(slices.Clone(runDrain), "--log-level", "loud"), code: 2, mention: "--log-level"},
		{name: "MalformedPayload", args: append(slices.Clone(enqueue), "--payload", `{"a": }`), code: 2, mention: "JSON"},
		{name: "MalformedPayloadOnStdin", args: append(slices.Clone(enqueue), "--payload", "-"), stdin: "not json", code: 2, mention: "JSON"},
		{name: "MissingPayloadFile", args: append(slices.Clone(enqueue), "--payload", "@/nonexistent/payload.json"), code: 2, mention: "payload"},
		{name: "MissingRequiredFlag", args: []string{"enqueue", "--table", c.table, "--aggregate-type", "order", "--payload", "{}"}, code: 2, mention: "required"},
		{name: "MissingTableStatus", args: []string{"status", "--table", missing}, code: 1, mention: "migrate"},
		{name: "MissingTableEnqueue", args: []string{"enqueue", "--table", missing, "--aggregate-type", "o", "--aggregate-id", "1", "--event-type", "E", "--payload", "{}"}, code: 1, mention: "migrate"},
		{name: "MissingTableRun", args: []string{"run", "--drain", "--table", missing}, code: 1, mention: "migrate"},
		{name: "MissingTableDeadList", args: []string{"dead", "list", "--table", missing}, code: 1, mention: "migrate"},
		{name: "MissingTableDeadRetry", args: []string{"dead", "retry", "--all", "--table", missing}, code: 1, mention: "migrate"},
		{name: "MissingTablePurge", args: []string{"purge", "--older-than", "1h", "--table", missing}, code: 1, mention: "migrate"},
		{name: "UnknownCommand", args: []string{"frobnicate", "--table", c.table}, code: 2, mention: "frobnicate"},
		{name: "UnknownFlag", args: []string{"status", "--table", c.table, "--bogus"}, code: 2, mention: "bogus"},
		{name: "UnknownRunFlag", args: append(slices.Clone(runDrain), "--bogus"), code: 2, mention: "bogus"},
		{name: "UnexpectedArgument", args: []string{"status", "--table", c.table, "extra"}, code: 2, mention: "extra"},
		{name: "UnexpectedArgumentMigrate", args: []string{"migrate", "--table", missing, "extra"}, code: 2, mention: "extra"},
		{name: "UnexpectedArgumentRun", args: append(slices.Clone(runDrain), "extra"), code: 2, mention: "extra"},
		{name: "TableWithTwoDots", args: []string{"migrate", "--table", c.schema + ".a.b"}, code: 2, mention: "--table"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := c.snapshot(t)
			env := c.env
			if tt.env != nil {
				env = tt.env
			}
			var stdin io.Reader
			if tt.stdin != "" {
				stdin = strings.NewReader(tt.stdin)
			}
			r := runBin(t, bin, env, stdin, tt.args...)
			requireFailure(t, r, tt.code)
			require.NotContains(t, r.stdout+r.stderr, secret, "%s", r)
			if tt.mention != "" {
				require.Contains(t, r.stderr, tt.mention, "%s", r)
			}
			require.Equal(t, before, c.snapshot(t), "the table changed")
			var exists bool
			require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
				"SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{c.schema, "missing"}.Sanitize()).Scan(&exists))
			require.False(t, exists, "a failed command created a table")
		})
	}
}

func testHostileTable(t *testing.T, bin string) {
	c := newCLI(t, bin)
	pool := testdb.Pool(t)
	ctx := context.Background()
	victim := pgx.Identifier{c.schema, "victim"}.Sanitize()
	c.exec(t, "CREATE TABLE "+victim+" (n int)")
	c.exec(t, "INSERT INTO "+victim+" VALUES (1)")
	// With the test schema first on the search path, an injected
	// unqualified DROP TABLE victim would find the victim.
	env := envWith(withParam(t, c.dsn, "search_path", c.schema))

	names := []string{
		`x"; DROP TABLE victim; --`,
		`x'); DROP TABLE victim; --`,
		`it's a "tåble" $$ {{table}} ✓`,
		"tab\tle; $outboxd0$ \u00a0名前",
	}
	unqualified := `y"; DROP TABLE victim; --`
	t.Cleanup(func() {
		// Should the search path not apply, the unqualified table lands in public.
		_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{"public", unqualified}.Sanitize()+" CASCADE")
	})
	tables := []string{}
	for _, n := range names {
		tables = append(tables, c.schema+"."+n)
	}
	tables = append(tables, unqualified)

	for i, table := range tables {
		name := table
		if i < len(names) {
			name = names[i]
		}
		run := func(stdin io.Reader, args ...string) result {
			t.Helper()
			r := runBin(t, bin, env, stdin, append(args, "--table", table)...)
			requireOK(t, r)
			return r
		}
		run(nil, "migrate")
		run(nil, "migrate")
		// Only this test's schema and public count: other tests' schemas
		// (or those a killed run left behind) may hold the same names.
		var relSchemas []string
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT coalesce(array_agg(n.nspname::text), '{}') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			 WHERE c.relname = $1 AND c.relkind = 'r' AND n.nspname IN ($2, 'public')`,
			name, c.schema).Scan(&relSchemas), "table %q", name)
		require.Equal(t, []string{c.schema}, relSchemas)

		r := run(strings.NewReader(`{"table": "hostile"}`), "enqueue", "--aggregate-type", "o", "--aggregate-id", name, "--event-type", "E", "--payload", "-")
		require.Regexp(t, idLine, r.stdout)
		id, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
		require.NoError(t, err)

		r = run(nil, "run", "--drain", "--sink", "stdout:")
		lines := jsonLines(t, r.stdout)
		require.Len(t, lines, 1, "%s", r)
		require.Equal(t, id, int64Of(t, lines[0]["id"]))
		require.Equal(t, name, stringOf(t, lines[0]["aggregate_id"]))

		r = run(nil, "status", "--json")
		var st struct{ Counts map[string]int64 }
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
		require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 1, "dead": 0}, st.Counts)

		r = run(nil, "dead", "list", "--json")
		require.Equal(t, "[]", strings.TrimSpace(r.stdout))
		r = run(nil, "purge", "--all")
		require.Contains(t, r.stdout, "purged 1 ")

		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+victim).Scan(&n), "victim table after %q", table)
		require.Equal(t, 1, n)
	}

	r := runBin(t, bin, env, nil, "migrate", "--table", c.schema+`.x"; DROP TABLE victim; --.y`)
	requireFailure(t, r, 2)
}

func testHelp(t *testing.T, bin string) {
	env := envWith("")
	r := runBin(t, bin, env, nil, "help")
	requireOK(t, r)
	commands := []string{"migrate", "enqueue", "run", "status", "dead", "replay", "purge", "config", "demo", "bench", "version"}
	for _, name := range commands {
		require.Regexp(t, `(?m)^\s+`+name+`\s`, r.stdout)
	}
	require.Empty(t, r.stderr)

	r = runBin(t, bin, env, nil)
	require.Equal(t, 2, r.code, "%s", r)
	requireNoPanic(t, r)
	require.Empty(t, r.stdout, "usage after a mistake belongs on stderr")
	require.Contains(t, r.stderr, "Usage: outboxd")

	r = runBin(t, bin, env, nil, "run", "-h")
	requireOK(t, r)
	require.Empty(t, r.stderr)
	require.Equal(t, 1, strings.Count(r.stdout, "Usage: outboxd run"), "the flag list is printed once\n%s", r)
	for _, f := range []string{"dsn", "table", "sink", "workers", "batch", "max-attempts", "lease", "poll-interval",
		"publish-timeout", "retry-base", "retry-cap", "defer-delay", "defer-max-age", "ordered", "no-notify", "owner",
		"drain", "log-format", "log-level"} {
		require.Regexp(t, `(?m)^\s+--`+f+`\b`, r.stdout)
	}

	for _, cmd := range [][]string{{"migrate", "-h"}, {"status", "--help"}, {"dead", "list", "-h"}, {"dead", "-h"}} {
		r = runBin(t, bin, env, nil, cmd...)
		requireOK(t, r)
		require.Equal(t, 1, strings.Count(r.stdout, "Usage:"), "%s", r)
	}

	r = runBin(t, bin, env, nil, "version")
	requireOK(t, r)
	require.Regexp(t, `^outboxd devel \(commit [0-9a-f]{40}(\+dirty)?, \S+\)\n$`, r.stdout)
	require.Equal(t, r.stdout, runBin(t, bin, env, nil, "--version").stdout)
	head, err := exec.Command("git", "-C", filepath.Join("..", ".."), "rev-parse", "HEAD").Output()
	require.NoError(t, err, "the suite runs in a git checkout")
	require.Contains(t, r.stdout, "commit "+strings.TrimSpace(string(head)))
}

var (
	deliveredLine  = regexp.MustCompile(`(?m)^\s+delivered\s+(\d+) unique ids$`)
	duplicatesLine = regexp.MustCompile(`(?m)^\s+duplicates\s+(\d+)$`)
)

// requireDemoSummary checks the summary on stderr and the JSON lines on
// stdout of a demo of the given number of orders (three events each).
func requireDemoSummary(t *testing.T, r result, orders int) {
	t.Helper()
	requireOK(t, r)
	want := strconv.Itoa(3 * orders)
	m := deliveredLine.FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "%s", r)
	require.Equal(t, want, m[1])
	m = duplicatesLine.FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "%s", r)
	require.Equal(t, "0", m[1])
	lines := jsonLines(t, r.stdout)
	require.Len(t, lines, 3*orders)
	ids := map[int64]bool{}
	for _, l := range lines {
		ids[int64Of(t, l["id"])] = true
	}
	require.Len(t, ids, 3*orders)
}

func testDemo(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	p := start(t, bin, envWith(dsn), nil, "demo", "--orders", "20", "--dsn", dsn)
	r := p.wait()
	requireDemoSummary(t, r, 20)
	// The demo works in a schema of its own, named after its pid, and drops it.
	var exists bool
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		"SELECT to_regnamespace($1) IS NOT NULL", fmt.Sprintf("outboxd_demo_%d", p.cmd.Process.Pid)).Scan(&exists))
	require.False(t, exists, "the demo schema is left behind")
}

func testDemoThrowaway(t *testing.T, bin string) {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "OUTBOX_DSN=") || strings.HasPrefix(kv, "PG")
	})
	r := runBin(t, bin, env, nil, "demo", "--orders", "10")
	requireDemoSummary(t, r, 10)
	require.Contains(t, r.stderr, "throwaway")
	require.Contains(t, r.stderr, "removed the throwaway cluster")
}

// requireNoSchemasLeft checks that bench dropped the schemas it made.
func requireNoSchemasLeft(t *testing.T, pid int) {
	t.Helper()
	var n int
	require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", fmt.Sprintf("outboxd_bench_%d_%%", pid)).Scan(&n))
	require.Zero(t, n)
}

func testBenchDrain(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	checkpoints := func() int64 {
		var n int64
		require.NoError(t, testdb.Pool(t).QueryRow(context.Background(), "SELECT checkpoints_req FROM pg_stat_bgwriter").Scan(&n))
		return n
	}
	before := checkpoints()
	p := start(t, bin, envWith(dsn), nil, "bench", "--messages", "2000", "--variant", "both", "--dsn", dsn)
	r := p.wait()
	requireOK(t, r)
	// Each drain starts on a fresh checkpoint, so its WAL figure holds no
	// full-page images of a checkpoint that fell inside it.
	require.GreaterOrEqual(t, checkpoints()-before, int64(2), "a CHECKPOINT before each of the two drains")
	require.NotContains(t, r.stderr, "no CHECKPOINT")
	require.Equal(t, 2, strings.Count(r.stdout, "messages/s"), "%s", r)
	require.Regexp(t, `(?m)^delivered\s+2000 in `, r.stdout)
	for _, s := range []string{"round trips/msg", "commits/msg", "delivery lag"} {
		require.Equal(t, 2, strings.Count(r.stdout, s), "%q\n%s", s, r)
	}
	require.Regexp(t, `(?m)^lease / seed: [0-9.]+x$`, r.stdout)
	requireNoSchemasLeft(t, p.cmd.Process.Pid)
}

// testShardLeases: migrate --shards sets a table up for --lease-mode
// shard, run delivers on it, and bench runs the mode with the usual lines.
func testShardLeases(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	table := testdb.NewSchema(t) + ".outbox"
	m := start(t, bin, envWith(dsn), nil, "migrate", "--table", table, "--shards", "4").wait()
	requireOK(t, m)
	require.Contains(t, m.stdout, "migrated table "+table+" with 4 shards")
	again := start(t, bin, envWith(dsn), nil, "migrate", "--table", table, "--shards", "8").wait()
	require.Equal(t, 1, again.code, "%s", again)
	require.Contains(t, again.stderr, "already has 4 shards")

	enq := start(t, bin, envWith(dsn), nil, "enqueue", "--table", table, "--aggregate-type", "order", "--aggregate-id", "1",
		"--event-type", "Created", "--payload", `{"a":1}`).wait()
	requireOK(t, enq)
	run := start(t, bin, envWith(dsn), nil, "run", "--table", table, "--lease-mode", "shard", "--sink", "null:", "--drain").wait()
	requireOK(t, run)

	bad := start(t, bin, envWith(dsn), nil, "run", "--table", table, "--lease-mode", "rows", "--drain").wait()
	require.Equal(t, 2, bad.code, "%s", bad)
	require.Contains(t, bad.stderr, "--lease-mode")

	b := start(t, bin, envWith(dsn), nil, "bench", "--messages", "2000", "--lease-mode", "shard", "--dsn", dsn)
	r := b.wait()
	requireOK(t, r)
	require.Regexp(t, `(?m)^throughput\s+[0-9]+ messages/s$`, r.stdout)
	require.Regexp(t, `(?m)^delivered\s+2000 in `, r.stdout)
	require.Regexp(t, `(?m)^server CPU/msg\s+[0-9]+\.[0-9] µs \(every postgres process`, r.stdout, "the suite's server runs on this machine")
	require.Regexp(t, `(?m)^outboxd bench on .*, batch 1000, shard leases, unordered$`, r.stdout)
	requireNoSchemasLeft(t, b.cmd.Process.Pid)

	// One aggregate's backlog: every message in order, one after another.
	one := start(t, bin, envWith(dsn), nil, "bench", "--messages", "300", "--aggregates", "1", "--lease-mode", "shard", "--ordered", "--dsn", dsn)
	r = one.wait()
	requireOK(t, r)
	require.Regexp(t, `(?m)^delivered\s+300 in `, r.stdout)
	requireNoSchemasLeft(t, one.cmd.Process.Pid)

	zero := start(t, bin, envWith(dsn), nil, "bench", "--aggregates", "0", "--dsn", dsn).wait()
	require.Equal(t, 2, zero.code, "%s", zero)
	require.Contains(t, zero.stderr, "--aggregates must be positive, got 0")
}

// testSnapshotCursors: migrate --shards N --cursor sets a table up for
// --lease-mode cursor, run drains it, status counts it delivered, the
// other modes refuse the table, and bench runs the mode with a held
// snapshot and writer.
func testSnapshotCursors(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	table := testdb.NewSchema(t) + ".outbox"
	lone := start(t, bin, envWith(dsn), nil, "migrate", "--table", table, "--cursor").wait()
	require.Equal(t, 2, lone.code, "%s", lone)
	require.Contains(t, lone.stderr, "--cursor needs --shards N")
	m := start(t, bin, envWith(dsn), nil, "migrate", "--table", table, "--shards", "4", "--cursor").wait()
	requireOK(t, m)
	require.Contains(t, m.stdout, "migrated table "+table+" with 4 shards and snapshot cursors")

	for i := range 3 {
		enq := start(t, bin, envWith(dsn), nil, "enqueue", "--table", table, "--aggregate-type", "order", "--aggregate-id", fmt.Sprint(i),
			"--event-type", "Created", "--payload", `{"a":1}`).wait()
		requireOK(t, enq)
	}
	shard := start(t, bin, envWith(dsn), nil, "run", "--table", table, "--lease-mode", "shard", "--sink", "null:", "--drain").wait()
	require.NotEqual(t, 0, shard.code, "%s", shard)
	require.Contains(t, shard.stderr, "has snapshot cursors: run its dispatchers with the cursor lease mode")
	run := start(t, bin, envWith(dsn), nil, "run", "--table", table, "--lease-mode", "cursor", "--sink", "null:", "--drain").wait()
	requireOK(t, run)
	st := start(t, bin, envWith(dsn), nil, "status", "--table", table, "--json").wait()
	requireOK(t, st)
	require.Contains(t, st.stdout, `"pending": 0,`)
	require.Contains(t, st.stdout, `"done": 3,`)

	prof := filepath.Join(t.TempDir(), "cpu.prof")
	b := start(t, bin, envWith(dsn), nil, "bench", "--messages", "2000", "--lease-mode", "cursor", "--hold-snapshot", "--hold-writer",
		"--cpu-profile", prof, "--dsn", dsn)
	r := b.wait()
	requireOK(t, r)
	// --cpu-profile leaves a pprof profile (gzipped protocol buffers).
	data, err := os.ReadFile(prof)
	require.NoError(t, err)
	require.Greater(t, len(data), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, data[:2], "a gzipped pprof profile")
	bad := start(t, bin, envWith(dsn), nil, "bench", "--cpu-profile", filepath.Join(t.TempDir(), "missing", "cpu.prof"), "--dsn", dsn).wait()
	require.Equal(t, 1, bad.code, "%s", bad)
	require.Contains(t, bad.stderr, "--cpu-profile: open ")
	require.Equal(t, 1, strings.Count(strings.TrimSpace(bad.stderr), "\n")+1, "one error line: %s", bad)
	require.Regexp(t, `(?m)^outboxd bench on .*, batch 1000, cursor leases, unordered$`, r.stdout)
	require.Regexp(t, `(?m)^delivered\s+2000 in `, r.stdout)
	require.Regexp(t, `(?m)^throughput\s+[0-9]+ messages/s$`, r.stdout)
	require.Regexp(t, `(?m)^held\s+a REPEATABLE READ snapshot held by another session for the whole drain$`, r.stdout)
	require.Regexp(t, `(?m)^held\s+a writing transaction left open by another session for the whole drain$`, r.stdout)
	requireNoSchemasLeft(t, b.cmd.Process.Pid)
}

func testBenchProducers(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	p := start(t, bin, envWith(dsn), nil, "bench", "--producers", "2", "--duration", "1s", "--rounds", "2", "--dsn", dsn)
	r := p.wait()
	requireOK(t, r)
	lines := regexp.MustCompile(`(?m)^.+\s[0-9]+ inserts/s .*median of 2\)$`).FindAllString(r.stdout, -1)
	require.Len(t, lines, 4, "one line per phase: no trigger, trigger polling, trigger listening, naive\n%s", r)
	require.Contains(t, lines[0], "100.0% of no trigger")
	requireNoSchemasLeft(t, p.cmd.Process.Pid)
}

// testBenchTenants: bench --tenants relays N tables in one process and
// reports their idle cost and a burst's throughput, every message of the
// burst delivered; the schemas are gone afterwards.
func testBenchTenants(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	p := start(t, bin, envWith(dsn), nil, "bench", "--tenants", "3", "--duration", "1s", "--messages", "300",
		"--poll-interval", "50ms", "--idle-poll-max", "200ms", "--dsn", dsn)
	r := p.wait()
	requireOK(t, r)
	require.Regexp(t, `(?m)^tenants 3 idle: [0-9]+ connections \(pool max 10\), [0-9.]+ queries/s, -?[0-9.]+ transactions/s on the database, relay CPU [0-9.]+% of a core, server CPU .+$`, r.stdout)
	require.Regexp(t, `(?m)^tenants 3 burst: 300 messages \(100 per tenant\) delivered in [0-9.]+m?s: [0-9]+ msg/s, at most [0-9]+ connections$`, r.stdout)
	requireNoSchemasLeft(t, p.cmd.Process.Pid)

	for _, args := range [][]string{{"--tenants", "-1"}, {"--tenants", "2", "--latency"}, {"--tenants", "2", "--variant", "both"}} {
		bad := start(t, bin, envWith(dsn), nil, append([]string{"bench", "--dsn", dsn}, args...)...).wait()
		require.Equal(t, 2, bad.code, "%s", bad)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(bad.stderr), "\n")+1, "one error line: %s", bad)
	}
}

func testBenchLatency(t *testing.T, bin string) {
	dsn := testdb.DSN(t)
	p := start(t, bin, envWith(dsn), nil, "bench", "--latency", "--rate", "100", "--producers", "2", "--duration", "1s", "--dsn", dsn)
	r := p.wait()
	requireOK(t, r)
	require.Regexp(t, `(?m)^latency p50 [0-9.]+ms p90 [0-9.]+ms p99 [0-9.]+ms max [0-9.]+ms$`, r.stdout)
	require.Regexp(t, `(?m)^throughput [0-9]+ messages/s$`, r.stdout)
	requireNoSchemasLeft(t, p.cmd.Process.Pid)

	// With --id-namespace the receiver gets "orders:ID" and still counts it.
	ns := start(t, bin, envWith(dsn), nil, "bench", "--latency", "--rate", "100", "--producers", "2", "--duration", "1s", "--id-namespace", "orders", "--dsn", dsn).wait()
	requireOK(t, ns)
	require.Regexp(t, `(?m)^latency p50 [0-9.]+ms p90 [0-9.]+ms p99 [0-9.]+ms max [0-9.]+ms$`, ns.stdout)

	bad := start(t, bin, envWith(dsn), nil, "bench", "--latency", "--sink", "null:", "--dsn", dsn).wait()
	require.Equal(t, 2, bad.code, "%s", bad)
	require.Contains(t, bad.stderr, "--latency delivers through the HTTP sink")
}

// --id-namespace qualifies the id a webhook receives; a namespace that
// would make the id ambiguous is a usage error naming the flag.
func testRunIDNamespace(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	id := c.enqueue(t, "agg", `{"n":1}`)
	keys := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get("Idempotency-Key") + " " + r.Header.Get("Ce-Id")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	c.ok(t, "run", "--drain", "--sink", srv.URL, "--table", c.table, "--id-namespace", "orders")
	want := "orders:" + c.uid(t, id)
	require.Equal(t, want+" "+want, <-keys)

	r := c.run(t, "run", "--drain", "--sink", srv.URL, "--table", c.table, "--id-namespace", "orders:eu")
	require.Equal(t, 2, r.code, "%s", r)
	require.Contains(t, r.stderr, "--id-namespace")
	require.NotContains(t, r.stderr, "IDNamespace")
}
