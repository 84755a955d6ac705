package cli_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/webhook"
)

func TestConfigAndRoutes(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)

	t.Run("PrecedenceFlagOverEnvOverFile", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		cfg := filepath.Join(t.TempDir(), "outboxd.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte(
			"workers: 20\nbatch: 30\nlease: 90s\ndsn: postgres://u:"+secret+"@127.0.0.1:5432/x\n"), 0o600))
		env := append(append([]string(nil), c.env...), "OUTBOXD_BATCH=40")
		r := runBin(t, bin, env, nil, "config", "check", "--config", cfg, "--lease", "2m")
		requireOK(t, r)
		require.NotContains(t, r.stdout+r.stderr, secret, "config check printed a password")
		lines := map[string]string{}
		for _, l := range strings.Split(r.stdout, "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 {
				lines[f[0]] = f[1] + " " + f[len(f)-1]
			}
		}
		require.Equal(t, "20 file", lines["workers"])
		require.Equal(t, "40 env", lines["batch"])
		require.Equal(t, "2m0s flag", lines["lease"])
		require.Equal(t, "12 default", lines["max-attempts"])
	})

	t.Run("ConfigErrorsNameTheFlag", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		goNames := regexp.MustCompile(`\b(BatchSize|DeferDelay|DeferMaxAge|FetchCooldown|HeartbeatInterval|Lease|MaxAttempts|PollInterval|PublishTimeout|RetryBase|RetryCap|Workers)\b`)
		for _, tc := range []struct{ args, mention []string }{
			{[]string{"--fetch-cooldown", "-1s"}, []string{"--fetch-cooldown"}},
			{[]string{"--workers", "-1"}, []string{"--workers"}},
			{[]string{"--batch", "-5"}, []string{"--batch"}},
			{[]string{"--max-attempts", "-1"}, []string{"--max-attempts"}},
			{[]string{"--lease", "5ms"}, []string{"--lease"}},
			{[]string{"--poll-interval", "-1s"}, []string{"--poll-interval"}},
			{[]string{"--retry-base", "-1s"}, []string{"--retry-base"}},
			{[]string{"--retry-cap", "1s", "--retry-base", "2s"}, []string{"--retry-cap", "--retry-base"}},
			{[]string{"--defer-delay", "-1s"}, []string{"--defer-delay"}},
			{[]string{"--heartbeat", "-1s"}, []string{"--heartbeat"}},
			{[]string{"--heartbeat", "30s", "--lease", "60s"}, []string{"--heartbeat", "--lease"}},
			{[]string{"--publish-timeout", "40s", "--lease", "60s"}, []string{"--publish-timeout", "--lease"}},
			{[]string{"--defer-max-age", "-1s"}, []string{"--defer-max-age"}},
		} {
			r := c.run(t, append([]string{"config", "check"}, tc.args...)...)
			requireFailure(t, r, 2)
			for _, m := range tc.mention {
				require.Contains(t, r.stderr, m, "%v", tc.args)
			}
			require.False(t, goNames.MatchString(r.stderr), "a Go field name for %v: %s", tc.args, r.stderr)
		}
	})

	// The error line is "outboxd: ", what the command was doing, then the
	// library's or the sink's error as it reported it: its package prefix
	// kept once, its text (and the input it quotes) unedited.
	t.Run("ErrorLinesKeepTheLibraryText", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		badTable := `outboxd: --table: outbox: table name "outbox: a.b.c" must be NAME or SCHEMA.NAME` + "\n"
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"status", "--table", "outbox: a.b.c"}, badTable},
			{[]string{"console", "--table", "outbox: a.b.c"}, badTable},
			{[]string{"config", "check", "--table", "outbox: a.b.c"}, badTable},
			{[]string{"config", "check", "--sink", "kafka://h:1?lingr=1s"}, `outboxd: sink kafka://h:1?lingr=1s: kafkasink: unknown URL parameter "lingr" ` +
				"(known: acks, client_id, create_topics, linger, max_buffered, sasl, timeout, tls, topic)\n"},
			{[]string{"config", "check", "--defer-max-age", "-1s"}, "outboxd: --defer-max-age must not be negative, got -1s\n"},
			// ReplayOpts.Validate's error, named from the same field table.
			{[]string{"replay", "--all", "--rate", "-1"}, "outboxd: --rate must be 0.01 to 1000000 messages per second, or 0 (unlimited), got -1\n"},
			{[]string{"replay", "--all", "--name", "no spaces"}, `outboxd: --name "no spaces" must be 1 to 100 letters, digits, ` +
				`'.', '_', ':' or '-', starting with a letter or digit` + "\n"},
		} {
			r := c.run(t, tc.args...)
			requireFailure(t, r, 2)
			require.Equal(t, tc.want, r.stderr, "%q", tc.args)
		}
	})

	t.Run("TypedZeroIsRefused", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		// 0 is the library's "use the default"; typed, it is a mistake, refused
		// before anything connects (the DSN points nowhere).
		for _, args := range [][]string{
			{"--retry-base", "0"}, {"--retry-cap", "0"}, {"--workers", "0"}, {"--batch", "0"},
			{"--poll-interval", "0"}, {"--lease", "0"}, {"--defer-delay", "0"}, {"--publish-timeout", "0"},
			{"--fetch-cooldown", "0"}, {"--max-attempts", "0"}, {"--batch", "-5"}, {"--lease", "-1s"},
		} {
			for _, cmd := range [][]string{{"config", "check"}, {"run", "--dsn", "postgres://127.0.0.1:1/x"}} {
				r := c.run(t, append(cmd, args...)...)
				requireFailure(t, r, 2)
				require.Equal(t, "outboxd: "+args[0]+" must be positive, got "+args[1]+"\n",
					strings.Replace(r.stderr, " 0s\n", " 0\n", 1), "%q", args)
			}
		}
		// From the environment too.
		r := runBin(t, c.bin, append(c.env, "OUTBOXD_BATCH=0"), nil, "config", "check")
		requireFailure(t, r, 2)
		require.Contains(t, r.stderr, "--batch must be positive, got 0")
		// Past an upper bound: named by the flag.
		r = c.run(t, "config", "check", "--batch", "1000000")
		requireFailure(t, r, 2)
		require.Equal(t, "outboxd: --batch must be at most 10000, got 1000000\n", r.stderr)
		r = c.run(t, "run", "--dsn", "postgres://127.0.0.1:1/x", "--lease", "60000h")
		requireFailure(t, r, 2)
		require.Equal(t, "outboxd: --lease must be at most 24h0m0s, got 60000h0m0s\n", r.stderr)
		// A zero with a meaning of its own stays a setting.
		requireOK(t, c.run(t, "config", "check", "--heartbeat", "0", "--defer-max-age", "0"))
	})

	t.Run("ShortLeaseDerivesThePublishTimeout", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		r := c.run(t, "config", "check", "--lease", "2s")
		requireOK(t, r)
		require.Regexp(t, `(?m)^publish-timeout\s+1s\s+default$`, r.stdout)
		r = c.run(t, "config", "check", "--lease", "2s", "--heartbeat", "500ms", "--publish-timeout", "30s")
		requireOK(t, r)
		requireFailure(t, c.run(t, "config", "check", "--lease", "2s", "--publish-timeout", "1500ms"), 2)
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		dir := t.TempDir()
		for name, content := range map[string]string{
			"unknown-key":     "workerz: 3\n",
			"bad-value":       "workers: many\n",
			"bad-duration":    "lease: soon\n",
			"not-yaml":        "workers: [1\n",
			"route-no-sink":   "routes:\n  - event_type: X\n",
			"route-bad-key":   "routes:\n  - evnt_type: X\n    sink: stdout\n",
			"bad-sink":        "sink: kafkaesque://x\n",
			"lease-too-short": "lease: 10s\npublish-timeout: 8s\n",
		} {
			path := filepath.Join(dir, name+".yaml")
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			r := c.run(t, "config", "check", "--config", path)
			requireFailure(t, r, 2)
		}
		requireFailure(t, c.run(t, "config", "check", "--config", filepath.Join(dir, "missing.yaml")), 2)
		requireFailure(t, c.run(t, "config"), 2)
	})

	t.Run("RoutesSendTypesToTheirSinks", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		c.migrate(t)
		var mu sync.Mutex
		got := map[string][]string{}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			got[r.URL.Path] = append(got[r.URL.Path], r.Header.Get("ce-type"))
			mu.Unlock()
			w.WriteHeader(http.StatusOK)
		}))
		t.Cleanup(srv.Close)
		cfg := filepath.Join(t.TempDir(), "routes.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte(
			"routes:\n"+
				"  - event_type: [\"Payment*\"]\n    sink: "+srv.URL+"/payments\n"+
				"  - aggregate_type: order\n    sink: "+srv.URL+"/orders\n"), 0o600))
		for _, m := range [][2]string{{"order", "OrderCreated"}, {"order", "PaymentTaken"}, {"customer", "CustomerCreated"}} {
			c.ok(t, "enqueue", "--table", c.table, "--aggregate-type", m[0], "--aggregate-id", "1", "--event-type", m[1], "--payload", "{}")
		}
		// customer/CustomerCreated matches no route and there is no default.
		r := c.run(t, "run", "--table", c.table, "--config", cfg, "--drain")
		requireFailure(t, r, 2)
		require.Contains(t, r.stderr, "customer/CustomerCreated")
		require.Equal(t, 3, c.count(t, "status = 'pending'"), "nothing may be delivered when the routing is incomplete")

		// With a default sink (flag overrides nothing in the file: it adds
		// the default route), everything is delivered to its route.
		r = c.run(t, "run", "--table", c.table, "--config", cfg, "--drain", "--sink", srv.URL+"/default")
		requireOK(t, r)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, map[string][]string{
			"/payments": {"PaymentTaken"},
			"/orders":   {"OrderCreated"},
			"/default":  {"CustomerCreated"},
		}, got)
	})

	t.Run("RouteFlagsReplaceFileRoutes", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		c.migrate(t)
		c.ok(t, "enqueue", "--table", c.table, "--aggregate-type", "order", "--aggregate-id", "1", "--event-type", "OrderCreated", "--payload", `{"a":1}`)
		r := c.run(t, "run", "--table", c.table, "--drain", "--route", "aggregate_type=order|invoice,event_type=Order*=stdout")
		requireOK(t, r)
		require.Len(t, jsonLines(t, r.stdout), 1)
		requireFailure(t, c.run(t, "run", "--table", c.table, "--route", "nosink"), 2)
		requireFailure(t, c.run(t, "run", "--table", c.table, "--route", "colour=red=stdout"), 2)
	})
}

func TestSignedWebhooksFromEnvironment(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	c := newCLI(t, bin)
	c.migrate(t)
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var mu sync.Mutex
	var verified, rejected int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		err := webhook.Verify([]string{whsec}, r.Header, body, 0, time.Time{})
		mu.Lock()
		if err == nil {
			verified++
		} else {
			rejected++
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	c.enqueue(t, "a", `{"n":1}`)
	c.enqueue(t, "b", `{"n":2}`)
	env := append(append([]string(nil), c.env...), "OUTBOXD_WEBHOOK_SECRET="+whsec)
	r := runBin(t, bin, env, nil, "run", "--table", c.table, "--drain", "--sink", srv.URL, "--log-level", "debug")
	requireOK(t, r)
	require.NotContains(t, r.stdout+r.stderr, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	mu.Lock()
	require.Equal(t, 2, verified)
	require.Zero(t, rejected)
	mu.Unlock()

	r = runBin(t, bin, env, nil, "config", "check", "--sink", srv.URL)
	requireOK(t, r)
	require.NotContains(t, r.stdout, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.Contains(t, r.stdout, "webhook-secret")

	// A malformed secret is a configuration error, reported without echoing it.
	bad := append(append([]string(nil), c.env...), "OUTBOXD_WEBHOOK_SECRET=whsec_not-base64-"+secret)
	r = runBin(t, bin, bad, nil, "run", "--table", c.table, "--drain", "--sink", srv.URL)
	requireFailure(t, r, 2)
	require.NotContains(t, r.stderr, secret)
}
