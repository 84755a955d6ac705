package cli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSecretsNeverShown runs the commands that print or log sink URLs and
// DSNs, with secrets in every form the parsers accept (and some they
// refuse), and checks that no part of a secret reaches the output.
func TestSecretsNeverShown(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	// requireHidden fails when any of the secret's parts shows.
	requireHidden := func(t *testing.T, r result, parts ...string) {
		t.Helper()
		for _, p := range parts {
			require.NotContains(t, r.stdout+r.stderr, p, "%s", r)
		}
	}

	t.Run("NATSTokenInConfigCheck", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		r := c.run(t, "config", "check", "--sink", "nats://"+secret+"@127.0.0.1:4222?subject=orders",
			"--route", "event_type=Order*=nats://"+secret+"@127.0.0.1:4222?subject=other")
		requireOK(t, r)
		requireHidden(t, r, secret)
		require.Regexp(t, `(?m)^sink\s+nats://xxxxx@127\.0\.0\.1:4222\?subject=orders\s+flag$`, r.stdout)
		require.Contains(t, r.stdout, "-> nats://xxxxx@127.0.0.1:4222?subject=other")
	})

	t.Run("NATSTokenInRunStartupLog", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		c.migrate(t)
		for _, format := range []string{"text", "json"} {
			r := c.run(t, "run", "--table", c.table, "--drain", "--log-format", format,
				"--sink", "nats://"+secret+"@127.0.0.1:4222?subject=outbox.default",
				"--route", "event_type=Order*=nats://"+secret+"@127.0.0.1:4222?subject=outbox.orders")
			requireOK(t, r)
			requireHidden(t, r, secret)
			require.Contains(t, r.stderr, "nats://xxxxx@127.0.0.1:4222", "%s", r)
		}
	})

	t.Run("DSNPasswordsInConfigCheck", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		for _, tc := range []struct {
			dsn   string
			shown string
			parts []string
		}{
			{"host=127.0.0.1 password = " + secret + " dbname=x", "host=127.0.0.1 password=xxxxx dbname=x", []string{secret}},
			{"host=127.0.0.1 password=" + secret + " dbname=x", "host=127.0.0.1 password=xxxxx dbname=x", []string{secret}},
			{`host=127.0.0.1 password='hun ter2\'sec ret' dbname=x`, "host=127.0.0.1 password=xxxxx dbname=x", []string{"hun", "ter2", "sec ret", "ret'"}},
			{"host=127.0.0.1 sslpassword=" + secret + " dbname=x", "host=127.0.0.1 sslpassword=xxxxx dbname=x", []string{secret}},
			{"postgres://app:" + secret + "@127.0.0.1/x?sslmode=disable", "postgres://app:xxxxx@127.0.0.1/x?sslmode=disable", []string{secret}},
			{"postgres://app@127.0.0.1/x?password=" + secret, "postgres://app@127.0.0.1/x?password=xxxxx", []string{secret}},
		} {
			r := c.run(t, "config", "check", "--dsn", tc.dsn)
			requireOK(t, r)
			requireHidden(t, r, tc.parts...)
			require.Contains(t, r.stdout, tc.shown, "%s", r)
		}
	})

	t.Run("UnparseableDSNNeverEchoed", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		for _, tc := range []struct {
			dsn   string
			parts []string
		}{
			// url.Parse fails: invalid port, and in the second the
			// "port" is the start of the password ("hun").
			{"postgres://u:" + secret + "@127.0.0.1:notaport/x", []string{secret, "notaport"}},
			{"postgres://u:hun/ter2@127.0.0.1/x", []string{"hun", "ter2"}},
			{"host=127.0.0.1 password='" + secret + " dbname=x", []string{secret}},
			{"host=127.0.0.1 password=" + secret + " port=notaport", []string{secret}},
			{"host=127.0.0.1 " + secret, []string{secret}},
		} {
			// config check refuses it offline, and so does every command,
			// without echoing it.
			for _, cmd := range [][]string{{"config", "check"}, {"status"}, {"run"}} {
				r := c.run(t, append(cmd, "--dsn", tc.dsn)...)
				requireFailure(t, r, 2)
				requireHidden(t, r, tc.parts...)
				require.Regexp(t, `^outboxd: invalid DSN: \S.*\n$`, r.stderr)
				require.NotContains(t, r.stdout, "configuration is valid")
			}
		}
		r := c.run(t, "config", "check", "--dsn", "not a dsn at all")
		requireFailure(t, r, 2)
		require.Empty(t, r.stdout)
		require.Regexp(t, `^outboxd: invalid DSN: \S.*\n$`, r.stderr)
	})

	t.Run("MistypedRouteNotEchoed", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		for _, route := range []string{
			"event_typ=Order*=nats://u:" + secret + "@127.0.0.1:4222?subject=x",
			"nats://" + secret + "@127.0.0.1:4222?subject=x",
			"nats://u:" + secret + "@127.0.0.1:4222",
			"event_type=Order*",
		} {
			for _, cmd := range [][]string{{"config", "check"}, {"run", "--drain"}} {
				r := c.run(t, append(cmd, "--route", route)...)
				requireFailure(t, r, 2)
				requireHidden(t, r, secret, "subject=x")
				require.Contains(t, r.stderr, "--route", "%s", r)
			}
			// The same from the environment.
			env := append(append([]string(nil), c.env...), "OUTBOXD_ROUTE="+route)
			r := runBin(t, bin, env, nil, "config", "check")
			requireFailure(t, r, 2)
			requireHidden(t, r, secret, "subject=x")
			require.Contains(t, r.stderr, "OUTBOXD_ROUTE", "%s", r)
		}
	})

	t.Run("MistypedSinkNotEchoed", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		for _, sink := range []string{
			"nats://u:hun/ter2@127.0.0.1:4222?subject=x", // the "port" is the start of the password
			"nats://" + secret + "@127.0.0.1:notaport?subject=x",
			"http://u:" + secret + "@[::1/x",
		} {
			r := c.run(t, "config", "check", "--sink", sink)
			requireFailure(t, r, 2)
			requireHidden(t, r, secret, "hun", "ter2", "notaport")
			require.Contains(t, r.stderr, "<unparseable URL>", "%s", r)
		}
		// A stray argument that is a URL is shown redacted.
		r := c.run(t, "config", "check", "nats://"+secret+"@127.0.0.1:4222?subject=x")
		requireFailure(t, r, 2)
		requireHidden(t, r, secret)
	})

	t.Run("RouteFileSinkNotEchoed", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t, bin)
		cfg := filepath.Join(t.TempDir(), "routes.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte(
			"routes:\n  - event_type: \"[\"\n    sink: nats://"+secret+"@127.0.0.1:4222?subject=x\n"), 0o600))
		r := c.run(t, "config", "check", "--config", cfg)
		requireFailure(t, r, 2)
		requireHidden(t, r, secret)
	})
}
