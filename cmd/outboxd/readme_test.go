package main_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/cli"
	"github.com/outboxd/outbox/internal/testdb"
)

// repoRoot is the module root, where README.md and examples/ live. The
// README's tests sit with the command they document, not in the library
// package, so that the library's own tests import no CLI or broker client
// (see TestLibraryDependencies).
const repoRoot = "../.."

// readmeBlocks returns the fenced blocks of README.md whose info string is
// info, in order.
func readmeBlocks(t *testing.T, info string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	re := regexp.MustCompile("(?ms)^```" + regexp.QuoteMeta(info) + "\n(.*?)^```\n")
	var out []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	return out
}

// hookRequest is one request the tutorial's webhook received.
type hookRequest struct {
	method string
	header http.Header
	body   string
}

// TestReadmeTutorial runs the README's tutorial blocks (```sh tutorial) as
// written, in order, with the outboxd binary on PATH, OUTBOX_DSN naming a
// fresh schema (through search_path, so the tutorial's unqualified
// "outbox" is that schema's) and WEBHOOK a local receiver; then checks that
// the event arrived as the README says.
func TestReadmeTutorial(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t, "sh tutorial")
	require.Len(t, blocks, 5, "five steps: migrate, insert, check and run, status, dead list")
	_, err := exec.LookPath("psql")
	require.NoError(t, err, "the tutorial's step 2 uses psql")

	binDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(binDir, "outboxd"), "./cmd/outboxd")
	build.Dir = repoRoot
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	var mu sync.Mutex
	var got []hookRequest
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, hookRequest{r.Method, r.Header.Clone(), string(body)})
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer hook.Close()

	schema := testdb.NewSchema(t)
	dsn := withSearchPath(t, testdb.DSN(t), schema)
	env := append(os.Environ(), "OUTBOX_DSN="+dsn, "WEBHOOK="+hook.URL+"/hook",
		"PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var outputs []string
	for i, block := range blocks {
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
		cmd.Env = env
		cmd.Dir = repoRoot
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "step %d:\n%s\nstdout:\n%s\nstderr:\n%s", i+1, block, stdout.String(), stderr.String())
		outputs = append(outputs, stdout.String())
	}

	require.Contains(t, outputs[0], "migrated table outbox")
	require.Contains(t, outputs[2], "every connection check passed")
	require.Regexp(t, `(?m)^done\s+1$`, outputs[3], "status counts the delivered message")
	require.Regexp(t, `(?m)^pending\s+0$`, outputs[3])
	require.Contains(t, outputs[4], "no dead messages")

	mu.Lock()
	defer mu.Unlock()
	var posts []hookRequest
	for _, r := range got {
		if r.method == http.MethodPost {
			posts = append(posts, r)
		}
	}
	require.Len(t, posts, 1, "one event, delivered once")
	p := posts[0]
	require.JSONEq(t, `{"order_id": 42, "amount": 1999}`, p.body)
	require.Equal(t, `{"amount": 1999, "order_id": 42}`, p.body, "the README shows the body as it arrives")
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, p.header.Get("Idempotency-Key"),
		"the identity is a UUID, as the README shows")
	require.Equal(t, "1", p.header.Get("Outbox-Row-Id"))
	require.Equal(t, "OrderPaid", p.header.Get("ce-type"))
	require.Equal(t, "42", p.header.Get("ce-subject"))
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	require.Contains(t, string(readme), "`POST "+p.body+"`")
}

// withSearchPath adds options=-c search_path=schema to a URL DSN, which
// both pgx and psql (libpq) send to the server at connection start.
func withSearchPath(t *testing.T, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err, "the test DSN is a URL")
	q := u.Query()
	q.Set("options", "-csearch_path="+schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestReadmeGoExample: the README's Go program is examples/quickstart,
// which go build and go vet check with the module.
func TestReadmeGoExample(t *testing.T) {
	t.Parallel()
	blocks := readmeBlocks(t, "go")
	file, err := os.ReadFile(filepath.Join(repoRoot, "examples", "quickstart", "main.go"))
	require.NoError(t, err)
	found := false
	for _, b := range blocks {
		if b == string(file) {
			found = true
		}
	}
	require.True(t, found, "README.md shows examples/quickstart/main.go verbatim in a go block")
}

// TestReadmeFlagTable: every flag of `outboxd run` has a row in the
// README's flag table (--dsn, --table and --config are described above it).
func TestReadmeFlagTable(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	code := cli.Main(context.Background(), []string{"run", "-h"}, strings.NewReader(""), &stdout, &stderr)
	require.Equal(t, cli.ExitOK, code, stderr.String())
	flags := regexp.MustCompile(`(?m)^\s+--?([a-z][a-z-]*)`).FindAllStringSubmatch(stdout.String(), -1)
	require.NotEmpty(t, flags)
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	for _, f := range flags {
		switch f[1] {
		case "dsn", "table", "config":
			continue
		}
		require.Regexp(t, `(?m)^\| (?:[^|]|\\\|)*`+"`--"+regexp.QuoteMeta(f[1])+"[ `]", string(readme), "README's flag table lacks --%s", f[1])
	}
}
