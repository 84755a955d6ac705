package cli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	outboxcli "github.com/outboxd/outbox/internal/cli"
	"github.com/outboxd/outbox/internal/testdb"
)

// mainResult is what one in-process run of the command line left behind.
type mainResult struct {
	code           int
	stdout, stderr string
}

func runMain(t *testing.T, args ...string) mainResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := outboxcli.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
	return mainResult{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// settings parses config check's table: setting -> "VALUE FROM".
func settings(out string) map[string]string {
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 {
			lines[f[0]] = f[1] + " " + f[len(f)-1]
		}
	}
	return lines
}

func TestParser(t *testing.T) {
	t.Parallel()

	t.Run("FlagsAfterPositionalArguments", func(t *testing.T) {
		t.Parallel()
		dsn := testdb.DSN(t)
		schema := testdb.NewSchema(t)
		table := schema + ".outbox"
		r := runMain(t, "migrate", "--dsn", dsn, "--table", table)
		require.Equal(t, 0, r.code, "%+v", r)
		var id int64
		require.NoError(t, testdb.Pool(t).QueryRow(context.Background(),
			"INSERT INTO "+pgx.Identifier{schema, "outbox"}.Sanitize()+
				` (aggregate_type, aggregate_id, event_type, payload, status, attempts, last_error)
			VALUES ('order', 'a', 'E', '{}', 'dead', 3, 'boom') RETURNING id`).Scan(&id))

		r = runMain(t, "dead", "retry", strconv.FormatInt(id, 10), "--table", table, "--dsn", dsn, "--dry-run")
		require.Equal(t, 0, r.code, "%+v", r)
		require.Equal(t, "would retry 1 messages\n", r.stdout)

		// The single-dash long form of Go's flag package still reads.
		r = runMain(t, "dead", "show", strconv.FormatInt(id, 10), "-table", table, "-dsn", dsn, "-json")
		require.Equal(t, 0, r.code, "%+v", r)
		require.Contains(t, r.stdout, `"last_error": "boom"`)
	})

	t.Run("BooleanFalseAndSingleDash", func(t *testing.T) {
		t.Parallel()
		r := runMain(t, "config", "check", "--ordered=false", "-no-notify=true", "-workers", "3", "--lease=40s")
		require.Equal(t, 0, r.code, "%+v", r)
		s := settings(r.stdout)
		require.Equal(t, "false flag", s["ordered"])
		require.Equal(t, "true flag", s["no-notify"])
		require.Equal(t, "3 flag", s["workers"])
		require.Equal(t, "40s flag", s["lease"])

		// A flag's value that starts with a dash is its value, not a flag.
		r = runMain(t, "config", "check", "--owner", "-worker-a")
		require.Equal(t, 0, r.code, "%+v", r)
		require.Equal(t, "-worker-a flag", settings(r.stdout)["owner"])
	})

	t.Run("DidYouMeanFlag", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"status", "--tabel", "x"}, {"status", "-tabel", "x"}, {"dead", "retry", "1", "--tabel=x"}} {
			r := runMain(t, args...)
			require.Equal(t, outboxcli.ExitUsage, r.code, "%q: %+v", args, r)
			require.Empty(t, r.stdout)
			require.Regexp(t, `^outboxd: .*unknown flag --tabel \(did you mean --table\?\)\n$`, r.stderr, "%q", args)
		}
		r := runMain(t, "status", "--zzzzzz")
		require.Equal(t, outboxcli.ExitUsage, r.code)
		require.Equal(t, "outboxd: status: unknown flag --zzzzzz\n", r.stderr)
	})

	t.Run("DidYouMeanCommand", func(t *testing.T) {
		t.Parallel()
		r := runMain(t, "statsu")
		require.Equal(t, outboxcli.ExitUsage, r.code)
		require.Empty(t, r.stdout)
		require.Equal(t, "outboxd: unknown command \"statsu\" (did you mean status?) (run `outboxd help`)\n", r.stderr)
		r = runMain(t, "zzzzzz")
		require.Equal(t, outboxcli.ExitUsage, r.code)
		require.Equal(t, "outboxd: unknown command \"zzzzzz\" (run `outboxd help`)\n", r.stderr)
		r = runMain(t, "--frobnicate")
		require.Equal(t, outboxcli.ExitUsage, r.code)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), "%+v", r)
	})

	t.Run("Completion", func(t *testing.T) {
		t.Parallel()
		for shell, start := range map[string]string{
			"bash": "# bash completion V2 for outboxd",
			"zsh":  "#compdef outboxd",
			"fish": "# fish completion for outboxd",
		} {
			r := runMain(t, "completion", shell)
			require.Equal(t, 0, r.code, "%s: %+v", shell, r)
			require.True(t, strings.HasPrefix(r.stdout, start), "%s script starts %q", shell, firstLineOf(r.stdout))
			require.Empty(t, r.stderr)
		}
		r := runMain(t, "completion", "tcsh")
		require.Equal(t, outboxcli.ExitUsage, r.code)
		require.Contains(t, r.stderr, "want bash, zsh or fish")

		// The scripts ask the binary; it answers with each command's flags.
		r = runMain(t, "__complete", "run", "--wor")
		require.Equal(t, 0, r.code, "%+v", r)
		require.Regexp(t, `(?m)^--workers\t`, r.stdout)
		r = runMain(t, "__complete", "dead", "")
		require.Equal(t, 0, r.code, "%+v", r)
		for _, sub := range []string{"list", "show", "retry", "skip"} {
			require.Regexp(t, `(?m)^`+sub+`$`, r.stdout)
		}
		r = runMain(t, "__complete", "run", "--sink", "")
		require.Equal(t, 0, r.code, "%+v", r)
		for _, v := range []string{"stdout:", "null:", "https://", "nats://", "kafka://", "mqtts://"} {
			require.Regexp(t, `(?m)^`+regexp.QuoteMeta(v)+`$`, r.stdout)
		}
		r = runMain(t, "__complete", "run", "-log-level", "")
		require.Regexp(t, `(?m)^warn$`, r.stdout)
		r = runMain(t, "__complete", "st")
		require.Regexp(t, `(?m)^status\t`, r.stdout)
	})

	t.Run("ConfigFileErrorsNameTheLine", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for content, want := range map[string]string{
			"workers: 3\nworkerz: 3\n":                              `line 2: unknown key "workerz"`,
			"workers: 3\n\nlease: soon\n":                           `line 3: lease: invalid duration "soon"`,
			"workers: 3\nsink: [a, b]\n":                            `line 2: sink must be a single value`,
			"workers: [1\n":                                         `line 1`,
			"routes:\n  - sink: x\n  - evnt_type: X\n    sink: x\n": `line 1: routes: route 2 (line 3): unknown key "evnt_type"`,
		} {
			path := filepath.Join(dir, strconv.Itoa(len(content))+".yaml")
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			r := runMain(t, "config", "check", "--config", path)
			require.Equal(t, outboxcli.ExitUsage, r.code, "%q: %+v", content, r)
			require.Contains(t, r.stderr, want, "%q", content)
		}
	})

	t.Run("Version", func(t *testing.T) {
		t.Parallel()
		long := runMain(t, "--version")
		require.Equal(t, 0, long.code, "%+v", long)
		// A test binary carries no VCS stamp: versionOf's unit test and the
		// built binary's test cover the commit.
		require.Regexp(t, `^outboxd devel \((commit [0-9a-f]{40}(\+dirty)?, \S+|commit unknown: .*)\)\n$`, long.stdout)
		cmd := runMain(t, "version")
		require.Equal(t, 0, cmd.code, "%+v", cmd)
		require.Equal(t, long.stdout, cmd.stdout)
	})

	t.Run("HelpShowsEnvironmentAndSchemes", func(t *testing.T) {
		t.Parallel()
		r := runMain(t, "run", "--help")
		require.Equal(t, 0, r.code, "%+v", r)
		for _, f := range []string{"table", "workers", "ordered", "sink", "webhook-secret"} {
			env := "OUTBOXD_" + strings.ToUpper(strings.ReplaceAll(f, "-", "_"))
			require.Regexp(t, `(?m)^\s+--`+f+`\b.*\n\s+.*\[\$`+env+`\]`, r.stdout, f)
		}
		require.Contains(t, r.stdout, "[$OUTBOX_DSN]")
		require.Regexp(t, `(?m)^\s+--table string\n.*\(default "outbox"\) \[\$OUTBOXD_TABLE\]$`, r.stdout)
		r = runMain(t, "migrate", "-h")
		require.Equal(t, 0, r.code, "%+v", r)
		require.Contains(t, r.stdout, "[$OUTBOXD_LOCK_TIMEOUT]")

		r = runMain(t, "help")
		require.Equal(t, 0, r.code)
		for _, scheme := range []string{"stdout", "null", "http", "https", "nats", "nats+tls", "amqp", "amqps",
			"kafka", "redis", "rediss", "mqtt", "mqtts"} {
			require.Regexp(t, `(?m)^Sink URL schemes.*[ ,]`+regexp.QuoteMeta(scheme)+`[,( ]`, r.stdout, scheme)
		}
		require.Regexp(t, `(?m)^\s+completion\s`, r.stdout)

		// `help COMMAND` is COMMAND --help.
		h := runMain(t, "help", "migrate")
		require.Equal(t, 0, h.code)
		require.Equal(t, runMain(t, "migrate", "--help").stdout, h.stdout)
	})
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
