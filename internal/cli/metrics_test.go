package cli_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testio"
)

func TestRunServesMetrics(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	c := newCLI(t, bin)
	c.migrate(t)
	c.enqueue(t, "a", `{"n":1}`)
	addr := testio.FreeAddr(t)
	p := start(t, bin, c.env, nil, "run", "--table", c.table, "--sink", "null:", "--metrics-addr", addr)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool { code, _ := get("/readyz"); return code == http.StatusOK },
		20*time.Second, 50*time.Millisecond, "never ready; stderr:\n%s", p.stderr.String())
	code, body := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", strings.TrimSpace(body))
	require.Eventually(t, func() bool {
		_, body := get("/metrics")
		return strings.Contains(body, fmt.Sprintf(`outbox_publishes_total{outcome="done",sink="null",table=%q} 1`, c.table))
	}, 20*time.Second, 50*time.Millisecond)
	_, body = get("/metrics")
	for _, name := range []string{"outbox_oldest_pending_age_seconds", "outbox_messages", "outbox_dispatcher_up", "go_goroutines"} {
		require.Contains(t, body, name)
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	requireOK(t, p.wait())

	// A metrics address that cannot be bound stops the run at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	r := c.run(t, "run", "--table", c.table, "--drain", "--metrics-addr", ln.Addr().String())
	requireFailure(t, r, 2)
	require.Contains(t, r.stderr, "--metrics-addr")
}
