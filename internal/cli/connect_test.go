package cli_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	outboxcli "github.com/outboxd/outbox/internal/cli"
	"github.com/outboxd/outbox/internal/testdb"
)

// connectCheck runs `outboxd config check --connect` in process (the
// binary's own entry point) with OUTBOX_DSN set to dsn.
func connectCheck(t *testing.T, dsn string, args ...string) result {
	t.Helper()
	t.Setenv("OUTBOX_DSN", dsn)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	args = append([]string{"config", "check", "--connect"}, args...)
	code := outboxcli.Main(ctx, args, strings.NewReader(""), &stdout, &stderr)
	r := result{args: args, code: code, stdout: stdout.String(), stderr: stderr.String()}
	require.NotContains(t, r.stdout+r.stderr, secret, "a secret was printed\n%s", r)
	return r
}

// checkLine finds the line reporting on subject and what.
func checkLine(t *testing.T, r result, status, subject, what string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^  ` + status + `\s+` + regexp.QuoteMeta(subject) + `[^\n]*` + regexp.QuoteMeta(what) + `.*$`)
	line := re.FindString(r.stdout)
	require.NotEmpty(t, line, "no %s line for %q / %q\n%s", status, subject, what, r)
	return line
}

func withPassword(dsn, user, password string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	return "postgres://" + user + ":" + password + "@" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/" + cfg.Database + "?sslmode=disable"
}

// TestConfigCheckConnect drives --connect against the real database and
// brokers through the mistakes a new deployment makes most.
//
// Not parallel: t.Setenv.
func TestConfigCheckConnect(t *testing.T) {
	dsn := testdb.DSN(t)

	t.Run("AllPass", func(t *testing.T) {
		schema := testdb.NewSchema(t)
		table := schema + ".outbox"
		migrate(t, dsn, table)
		stream := "OUTBOXD_CHECK_" + strings.ToUpper(schema)
		js := natsJS(t)
		_, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: stream, Subjects: []string{schema + ".>"}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })
		ch := rabbit(t)
		require.NoError(t, ch.ExchangeDeclare(schema, "topic", false, true, false, false, nil))
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusMethodNotAllowed)
		}))
		defer hook.Close()
		kafka, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, schema))
		require.NoError(t, err)
		defer kafka.Close()

		r := connectCheck(t, dsn, "--table", table,
			"--route", "event_type=A=nats://"+natsAddr+"?subject="+schema+".{event_type}",
			"--route", "event_type=B=amqp://guest:guest@"+rabbitAddr+"/?exchange="+schema,
			"--route", "event_type=C=redis://"+redisAddr+"/0",
			"--route", "event_type=D=mqtt://"+mqttAddr,
			"--route", "event_type=E=kafka://"+kafka.ListenAddrs()[0]+"?topic="+schema,
			"--sink", hook.URL+"/hook")
		require.Equal(t, outboxcli.ExitOK, r.code, "%s", r)
		require.NotContains(t, r.stdout, "FAIL", "%s", r)
		checkLine(t, r, "ok", "database", "reachable (PostgreSQL")
		checkLine(t, r, "ok", "table "+table, "present and current")
		checkLine(t, r, "ok", "role postgres", "grants")
		checkLine(t, r, "ok", "database", "LISTEN on the wake-up channel")
		checkLine(t, r, "ok", "sink nats://", `a stream captures subject "`+schema+`.*" (stream `+stream)
		checkLine(t, r, "ok", "sink amqp://", `exchange "`+schema+`" present`)
		checkLine(t, r, "ok", "sink redis://", "reachable and authenticated")
		checkLine(t, r, "ok", "sink mqtt://", "reachable and authenticated")
		checkLine(t, r, "ok", "sink kafka://", `topic "`+schema+`" present`)
		checkLine(t, r, "ok", "sink http://", "reachable and authenticated (HEAD answered 405")
		require.Contains(t, r.stdout, "every connection check passed")
	})

	t.Run("WrongDSN", func(t *testing.T) {
		r := connectCheck(t, "postgres://postgres:"+secret+"@127.0.0.1:1/test?connect_timeout=2", "--sink", "stdout:")
		require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
		line := checkLine(t, r, "FAIL", "database", "reachable")
		require.Contains(t, line, "fix: correct --dsn")
		require.Contains(t, r.stderr, "database: reachable")
	})

	t.Run("MissingTable", func(t *testing.T) {
		table := testdb.NewSchema(t) + ".outbox"
		r := connectCheck(t, dsn, "--table", table)
		require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
		line := checkLine(t, r, "FAIL", "table "+table, "present")
		require.Contains(t, line, "fix: run `outboxd migrate`")
	})

	t.Run("OutdatedTable", func(t *testing.T) {
		schema := testdb.NewSchema(t)
		table := schema + ".outbox"
		migrate(t, dsn, table)
		_, err := testdb.Pool(t).Exec(t.Context(), "ALTER TABLE "+table+" DROP COLUMN headers; DROP TABLE "+table+"_audit")
		require.NoError(t, err)
		r := connectCheck(t, dsn, "--table", table)
		require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
		line := checkLine(t, r, "FAIL", "table "+table, "current")
		require.Contains(t, line, "no headers column, outbox_audit")
		require.Contains(t, line, "fix: run `outboxd migrate`")
		migrate(t, dsn, table)
		r = connectCheck(t, dsn, "--table", table)
		require.Equal(t, outboxcli.ExitOK, r.code, "%s", r)
	})

	t.Run("MissingGrants", testConnectMissingGrants)

	t.Run("BrokerDown", func(t *testing.T) {
		r := connectCheck(t, dsn, "--no-notify", "--table", "x.nothing",
			"--route", "event_type=A=nats://127.0.0.1:1?subject=a.b",
			"--route", "event_type=B=amqp://guest:"+secret+"@127.0.0.1:1/?exchange=x",
			"--route", "event_type=C=redis://:"+secret+"@127.0.0.1:1/0",
			"--route", "event_type=D=mqtt://u:"+secret+"@127.0.0.1:1",
			"--sink", "http://u:"+secret+"@127.0.0.1:1/hook")
		require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
		for _, s := range []string{"sink nats://", "sink amqp://", "sink redis://", "sink mqtt://", "sink http://"} {
			line := checkLine(t, r, "FAIL", s, "reachable")
			require.Contains(t, line, "fix: start", "%s", line)
		}
	})

	t.Run("WebhookPathNotFound", func(t *testing.T) {
		hook := httptest.NewServer(http.NotFoundHandler())
		defer hook.Close()
		r := connectCheck(t, dsn, "--no-notify", "--table", "x.nothing", "--sink", hook.URL+"/hok")
		require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
		line := checkLine(t, r, "FAIL", "sink http://", "reachable and authenticated")
		require.Contains(t, line, "answered 404 Not Found to HEAD", "%s", line)
		require.Contains(t, line, "fix: correct the path", "%s", line)
		require.NotContains(t, r.stdout, "every connection check passed")
	})

	t.Run("WrongCredentials", func(t *testing.T) {
		// The default Redis user takes any password: an ACL user has one.
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
		user := "outboxd_check_" + testdb.NewSchema(t)
		require.NoError(t, rdb.Do(t.Context(), "ACL", "SETUSER", user, "on", ">right-password", "~*", "+@all").Err())
		t.Cleanup(func() { _ = rdb.Do(context.Background(), "ACL", "DELUSER", user).Err() })
		r := connectCheck(t, dsn, "--no-notify", "--table", "x.nothing",
			"--route", "event_type=B=amqp://guest:"+secret+"@"+rabbitAddr+"/",
			"--sink", "redis://"+user+":"+secret+"@"+redisAddr+"/0")
		require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
		for _, s := range []string{"sink amqp://", "sink redis://"} {
			line := checkLine(t, r, "FAIL", s, "reachable and authenticated")
			require.Contains(t, line, "fix: correct the user and password", "%s", line)
		}
	})

	t.Run("MissingStreamExchangeTopic", func(t *testing.T) {
		kafka, err := kfake.NewCluster(kfake.NumBrokers(1))
		require.NoError(t, err)
		defer kafka.Close()
		r := connectCheck(t, dsn, "--no-notify", "--table", "x.nothing",
			"--route", "event_type=A=nats://"+natsAddr+"?subject=outboxd_nostream.{event_type}",
			"--route", "event_type=B=amqp://guest:guest@"+rabbitAddr+"/?exchange=outboxd_noexchange",
			"--sink", "kafka://"+kafka.ListenAddrs()[0]+"?topic=outboxd_notopic")
		require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
		require.Contains(t, checkLine(t, r, "FAIL", "sink nats://", "a stream captures subject"), "nats stream add")
		require.Contains(t, checkLine(t, r, "FAIL", "sink amqp://", `exchange "outboxd_noexchange" present`), "declare it")
		require.Contains(t, checkLine(t, r, "FAIL", "sink kafka://", `topic "outboxd_notopic" present`), "create_topics=true")
	})
}

// testConnectMissingGrants: a real role with too few privileges fails the
// check; granting what the fix says makes it pass, and that role can then
// relay a message for real.
func testConnectMissingGrants(t *testing.T) {
	dsn := testdb.DSN(t)
	schema := testdb.NewSchema(t)
	table := schema + ".outbox"
	migrate(t, dsn, table)
	pool := testdb.Pool(t)
	ctx := t.Context()
	role := "r_" + schema
	_, err := pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD '"+secret+"'")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	_, err = pool.Exec(ctx, "GRANT SELECT ON "+table+" TO "+role)
	require.NoError(t, err)
	roleDSN := withPassword(dsn, role, secret)

	r := connectCheck(t, roleDSN, "--table", table, "--retention", "7d")
	require.Equal(t, outboxcli.ExitFailure, r.code, "%s", r)
	line := checkLine(t, r, "FAIL", "role "+role, "grants")
	require.Contains(t, line, "USAGE on schema "+pgx.Identifier{schema}.Sanitize())
	require.Contains(t, line, "UPDATE, DELETE on table "+pgx.Identifier{schema, "outbox"}.Sanitize())
	require.Contains(t, line, "SELECT, INSERT, UPDATE, DELETE on table "+pgx.Identifier{schema, "outbox_waiters"}.Sanitize())
	_, fix, ok := strings.Cut(line, "fix: as the table's owner: ")
	require.True(t, ok, line)
	_, err = pool.Exec(ctx, fix)
	require.NoError(t, err, "the suggested GRANTs run as written: %s", fix)

	r = connectCheck(t, roleDSN, "--table", table, "--retention", "7d")
	require.Equal(t, outboxcli.ExitOK, r.code, "%s", r)
	checkLine(t, r, "ok", "role "+role, "grants")

	// The granted role relays: the list of privileges is enough.
	enqueue(t, dsn, table)
	var stdout, stderr bytes.Buffer
	t.Setenv("OUTBOX_DSN", roleDSN)
	rctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	code := outboxcli.Main(rctx, []string{"run", "--table", table, "--drain", "--retention", "7d", "--sink", "stdout:"},
		strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, outboxcli.ExitOK, code, "stderr:\n%s", stderr.String())
	require.Contains(t, stdout.String(), `"event_type":"Checked"`)
	require.NotContains(t, stderr.String(), "permission denied")
}

func migrate(t *testing.T, dsn, table string) {
	t.Helper()
	t.Setenv("OUTBOX_DSN", dsn)
	var out bytes.Buffer
	require.Equal(t, outboxcli.ExitOK, outboxcli.Main(t.Context(), []string{"migrate", "--table", table}, nil, &out, &out), out.String())
}

func enqueue(t *testing.T, dsn, table string) {
	t.Helper()
	t.Setenv("OUTBOX_DSN", dsn)
	var out bytes.Buffer
	code := outboxcli.Main(t.Context(), []string{"enqueue", "--table", table, "--aggregate-type", "check",
		"--aggregate-id", "1", "--event-type", "Checked", "--payload", `{"ok":true}`}, nil, &out, &out)
	require.Equal(t, outboxcli.ExitOK, code, out.String())
}

func natsJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("nats://"+natsAddr, nats.Timeout(5*time.Second))
	require.NoError(t, err, "NATS must run at %s", natsAddr)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}
