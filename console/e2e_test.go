package console_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
	"github.com/outboxd/outbox/internal/testdb"
	"github.com/outboxd/outbox/internal/testio"
)

const chromiumPath = "/usr/bin/chromium"

// requireTools returns node's path, or skips the test when node, npm or
// Chromium is missing (a failure when OUTBOX_REQUIRE_TOOLS is set, as CI
// does where it installs them).
func requireTools(t *testing.T) string {
	t.Helper()
	var missing []string
	node, err := exec.LookPath("node")
	if err != nil {
		missing = append(missing, "node")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing = append(missing, "npm")
	}
	if _, err := os.Stat(chromiumPath); err != nil {
		missing = append(missing, chromiumPath+" (apt-get install chromium)")
	}
	if len(missing) == 0 {
		return node
	}
	if os.Getenv("OUTBOX_REQUIRE_TOOLS") != "" {
		require.FailNowf(t, "tools missing", "%s missing and OUTBOX_REQUIRE_TOOLS is set", strings.Join(missing, ", "))
	}
	t.Skipf("the browser test needs %s", strings.Join(missing, ", "))
	return ""
}

// npmCI installs the e2e script's pinned dependencies when they are missing.
func npmCI(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("e2e", "node_modules", "playwright-core")); err == nil {
		return
	}
	cmd := exec.CommandContext(t.Context(), "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = "e2e"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "npm ci in console/e2e:\n%s", out)
}

func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outboxd")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/outboxd")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/outboxd:\n%s", out)
	return bin
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startBin starts the binary and stops it (SIGTERM, then kill) at the end
// of the test; its stderr is in the returned buffer.
func startBin(t *testing.T, bin string, env []string, args ...string) *syncBuffer {
	t.Helper()
	stderr := &syncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, io.Discard, stderr
	cmd.WaitDelay = 5 * time.Second
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return stderr
}

// TestE2EBrowser drives the console in headless Chromium (console/e2e):
// every page loads without a console error, and retrying all dead messages
// matching a filter makes the count fall to zero. With OUTBOX_SCREENSHOTS
// set to a directory, it leaves a screenshot of each page there
// (OUTBOX_SCREENSHOTS=$PWD/docs/screenshots refreshes the README's).
func TestE2EBrowser(t *testing.T) {
	t.Parallel()
	node := requireTools(t)
	npmCI(t)
	bin := buildBinary(t)
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	history := b.relayWithFailures(t)
	const matching, other = 3000, 40
	b.seed(t, 400, "OrderPaid", "done")
	b.seed(t, matching, "PaymentFailed", "dead")
	b.seed(t, other, "EmailBounced", "dead")
	b.seed(t, 300, "OrderShipped", "pending")
	b.exec(t, `UPDATE {{table}} SET status = 'processing', attempts = 1, lease_version = 1, lease_owner = 'worker-a:4711',
	           lease_until = now() + interval '1 hour' WHERE id IN (SELECT id FROM {{table}} WHERE status = 'pending' ORDER BY id LIMIT 25)`)

	addr := freeAddr(t)
	env := append(os.Environ(), "OUTBOX_DSN="+testdb.DSN(t), console.EnvToken+"="+testToken)
	logs := startBin(t, bin, env, "console", "--table", b.table, "--addr", addr, "--write", "--sample-interval", "250ms")
	startBin(t, bin, env, "run", "--table", b.table, "--sink", "null:", "--log-level", "warn")
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/login")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "console never answered:\n%s", logs.String())

	shots := os.Getenv("OUTBOX_SCREENSHOTS")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "console.mjs")
	cmd.Dir = "e2e"
	cmd.Env = append(os.Environ(), "CONSOLE_URL=http://"+addr, "CONSOLE_TOKEN="+testToken, "CONSOLE_TABLE="+b.table,
		"DEAD_EVENT=PaymentFailed", fmt.Sprint("DEAD_MATCHING=", matching), fmt.Sprint("DEAD_OTHER=", other), "SCREENSHOTS="+shots,
		fmt.Sprint("HISTORY_ID=", history))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, err, "browser test failed:\n%s\n%s\nconsole log:\n%s", out.String(), errOut.String(), logs.String())
	t.Log(strings.TrimSpace(out.String()))
	require.Contains(t, logs.String(), "outbox audit")
	require.NotContains(t, logs.String(), testToken)
}

// TestE2ETLS signs in, in headless Chromium, to a console serving HTTPS
// with a self-signed certificate on a wildcard address (console/e2e/tls.mjs)
// and checks the session cookie's flags and HSTS as the browser keeps them.
func TestE2ETLS(t *testing.T) {
	t.Parallel()
	node := requireTools(t)
	npmCI(t)
	bin := buildBinary(t)
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	cert, pool := testio.SelfSigned(t, "outboxd console")
	certFile, keyFile := testio.WriteCert(t, t.TempDir(), cert)
	_, port, err := net.SplitHostPort(freeAddr(t))
	require.NoError(t, err)
	env := append(os.Environ(), "OUTBOX_DSN="+testdb.DSN(t), console.EnvUser+"=ops", console.EnvPassword+"=pa55-w0rd-tls")
	logs := startBin(t, bin, env, "console", "--table", b.table, "--addr", "0.0.0.0:"+port, "--write",
		"--tls-cert", certFile, "--tls-key", keyFile)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	base := "https://127.0.0.1:" + port
	require.Eventually(t, func() bool {
		resp, err := client.Get(base + "/login")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond, "console never answered:\n%s", logs.String())

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "tls.mjs")
	cmd.Dir = "e2e"
	cmd.Env = append(os.Environ(), "CONSOLE_URL="+base, "CONSOLE_USER=ops", "CONSOLE_PASSWORD=pa55-w0rd-tls")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "browser test failed:\n%s\n%s\nconsole log:\n%s", out.String(), errOut.String(), logs.String())
	t.Log(strings.TrimSpace(out.String()))
	require.Contains(t, logs.String(), "https://")
	require.NotContains(t, logs.String(), "pa55-w0rd-tls")
}
