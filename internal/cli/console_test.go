package cli_test

import (
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

// getWith fetches url with a bearer token.
func getWith(url, token string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	c := newCLI(t, bin)
	c.migrate(t)
	c.enqueue(t, "a", `{"n":1}`)

	t.Run("RunServesConsole", func(t *testing.T) {
		addr := testio.FreeAddr(t)
		env := append(c.env, "OUTBOXD_CONSOLE_TOKEN=tok-456")
		p := start(t, bin, env, nil, "run", "--table", c.table, "--sink", "null:", "--console-addr", addr)
		require.Eventually(t, func() bool {
			code, body := getWith("http://"+addr+"/api/v1/status", "tok-456")
			return code == http.StatusOK && strings.Contains(body, `"done": 1`)
		}, 20*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr.String())
		code, body := getWith("http://"+addr+"/api/v1/tables", "tok-456")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `"write": false`)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		requireOK(t, p.wait())
	})
	// A page whose name was rebound to the console's address reads
	// nothing: any Host but the console's own names is refused 421.
	t.Run("RefusesOtherHosts", func(t *testing.T) {
		addr := testio.FreeAddr(t)
		p := start(t, bin, c.env, nil, "console", "--table", c.table, "--addr", addr, "--allow-host", "console.internal")
		get := func(host string) (int, string) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/status", nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		require.Eventually(t, func() bool { code, _ := get(addr); return code == http.StatusOK }, 20*time.Second, 50*time.Millisecond,
			"stderr:\n%s", p.stderr.String())
		_, port, _ := net.SplitHostPort(addr)
		for _, host := range []string{"localhost:" + port, "console.internal:" + port, "CONSOLE.INTERNAL.", "[::1]:" + port} {
			code, body := get(host)
			require.Equal(t, http.StatusOK, code, "%s: %s", host, body)
		}
		for _, host := range []string{"rebind.example:" + port, "rebind.example", "127.0.0.2:" + port} {
			code, body := get(host)
			require.Equal(t, http.StatusMisdirectedRequest, code, host)
			require.NotContains(t, body, "pending", "nothing of the table")
		}
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		requireOK(t, p.wait())
	})
	// The message is delivered: nothing undelivered, so both reads are equal.
	t.Run("ServesStatus", func(t *testing.T) {
		addr := testio.FreeAddr(t)
		env := append(c.env, "OUTBOXD_CONSOLE_TOKEN=tok-123")
		p := start(t, bin, env, nil, "console", "--table", c.table, "--addr", addr)
		var code int
		var body string
		require.Eventually(t, func() bool {
			code, body = getWith("http://"+addr+"/api/v1/status", "tok-123")
			return code == http.StatusOK
		}, 20*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr.String())
		require.Equal(t, c.ok(t, "status", "--table", c.table, "--json").stdout, body)
		code, _ = getWith("http://"+addr+"/api/v1/status", "wrong")
		require.Equal(t, http.StatusUnauthorized, code)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		r := p.wait()
		requireOK(t, r)
		require.Contains(t, r.stderr, "console listening")
		require.NotContains(t, r.stderr, "tok-123")
	})
	t.Run("RefusesUnsafeStarts", func(t *testing.T) {
		for _, args := range [][]string{
			{"console", "--table", c.table, "--addr", "0.0.0.0:0"},
			{"console", "--table", c.table, "--addr", "127.0.0.1:0", "--write"},
		} {
			r := c.run(t, args...)
			require.Equal(t, 2, r.code, r)
			require.Contains(t, r.stderr, "credentials are required")
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one error line: %s", r.stderr)
		}
		r := c.run(t, "console", "--table", "nope.outbox", "--addr", "127.0.0.1:0")
		require.Equal(t, 1, r.code, r)
		require.Contains(t, r.stderr, "nope.outbox")
	})
}
