package cli_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testio"
)

// testListenerFlood: with an open-file limit of 64, a flood of connections
// to the console that never finish a request leaves /healthz answering:
// each listener holds a share of the limit, the rest wait in the kernel's
// backlog.
func testListenerFlood(t *testing.T, bin string) {
	c := newCLI(t, bin)
	c.migrate(t)
	metricsAddr, consoleAddr := testio.FreeAddr(t), testio.FreeAddr(t)
	p := start(t, "/bin/sh", c.env, nil, "-c", `ulimit -n 64 && exec "$0" "$@"`, bin,
		"run", "--table", c.table, "--sink", "null:", "--metrics-addr", metricsAddr, "--console-addr", consoleAddr)
	healthz := func(timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/healthz", nil)
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	require.Eventually(t, func() bool {
		code, err := healthz(time.Second)
		return err == nil && code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr)
	require.Eventually(t, func() bool { return strings.Contains(p.stderr.String(), "console listening") }, 10*time.Second, 20*time.Millisecond)

	var flood []net.Conn
	t.Cleanup(func() {
		for _, conn := range flood {
			_ = conn.Close()
		}
	})
	for range 120 {
		conn, err := net.DialTimeout("tcp", consoleAddr, time.Second)
		require.NoError(t, err)
		_, _ = conn.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n")) // never finished
		flood = append(flood, conn)
	}
	for range 5 {
		code, err := healthz(2 * time.Second)
		require.NoError(t, err, "/healthz during the flood; stderr:\n%s", p.stderr)
		require.Equal(t, http.StatusOK, code)
	}
	require.NotContains(t, p.stderr.String(), "too many open files")
}
