package cli_test

import (
	"crypto/tls"
	"crypto/x509"
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

// httpsGet fetches url trusting pool only, with a bearer token when one is
// given: the status, the headers and the body.
func httpsGet(pool *x509.CertPool, url, token string) (int, http.Header, string, error) {
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), nil
}

// servedName is the common name of the certificate addr shows.
func servedName(addr string) string {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads what is served
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func TestTLSListeners(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	c := newCLI(t, bin)
	c.migrate(t)
	dir := t.TempDir()
	first, pool := testio.SelfSigned(t, "first")
	certFile, keyFile := testio.WriteCert(t, dir, first)
	withToken := append(c.env[:len(c.env):len(c.env)], "OUTBOXD_CONSOLE_TOKEN=tok-tls")

	// On every address, credentials cross the network only over TLS: the
	// console serves HTTPS with HSTS, refuses plain HTTP, and serves a
	// renewed certificate without a restart (SIGHUP no longer ends it).
	t.Run("ConsoleServesHTTPS", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(testio.FreeAddr(t))
		p := start(t, bin, withToken, nil, "console", "--table", c.table, "--addr", "0.0.0.0:"+port, "--tls-cert", certFile, "--tls-key", keyFile)
		url := "https://127.0.0.1:" + port + "/api/v1/status"
		var header http.Header
		require.Eventually(t, func() bool {
			code, h, _, err := httpsGet(pool, url, "tok-tls")
			header = h
			return err == nil && code == http.StatusOK
		}, 20*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr.String())
		require.Equal(t, "max-age=31536000", header.Get("Strict-Transport-Security"))
		plain, err := http.Get("http://127.0.0.1:" + port + "/api/v1/status")
		require.NoError(t, err)
		plain.Body.Close()
		require.Equal(t, http.StatusBadRequest, plain.StatusCode, "plain HTTP on the TLS port")

		second, _ := testio.SelfSigned(t, "second")
		testio.WriteCert(t, dir, second)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
		require.Eventually(t, func() bool { return servedName("127.0.0.1:"+port) == "second" }, 10*time.Second, 100*time.Millisecond,
			"stderr:\n%s", p.stderr.String())
		_, _, _, err = httpsGet(pool, url, "tok-tls") // the pool trusts only the first
		require.Error(t, err, "the renewed certificate is served")
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		r := p.wait()
		requireOK(t, r)
		require.Contains(t, r.stderr, "https://")
		require.Contains(t, r.stderr, "TLS certificate reloaded")
		testio.WriteCert(t, dir, first)
	})
	t.Run("RefusesClearTextCredentials", func(t *testing.T) {
		r := runBin(t, bin, withToken, nil, "console", "--table", c.table, "--addr", "0.0.0.0:0")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "--behind-tls-proxy")
		require.Contains(t, r.stderr, "--tls-cert")
		require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one error line: %s", r.stderr)
	})
	t.Run("BehindTLSProxy", func(t *testing.T) {
		_, port, _ := net.SplitHostPort(testio.FreeAddr(t))
		p := start(t, bin, withToken, nil, "console", "--table", c.table, "--addr", "0.0.0.0:"+port, "--behind-tls-proxy")
		var hsts string
		require.Eventually(t, func() bool {
			req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+port+"/api/v1/status", nil)
			req.Header.Set("Authorization", "Bearer tok-tls")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			hsts = resp.Header.Get("Strict-Transport-Security")
			return resp.StatusCode == http.StatusOK
		}, 20*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr.String())
		require.Equal(t, "max-age=31536000", hsts)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		requireOK(t, p.wait())
	})
	t.Run("MetricsServeHTTPS", func(t *testing.T) {
		addr := testio.FreeAddr(t)
		p := start(t, bin, c.env, nil, "run", "--table", c.table, "--sink", "null:", "--metrics-addr", addr, "--tls-cert", certFile, "--tls-key", keyFile)
		require.Eventually(t, func() bool {
			code, _, body, err := httpsGet(pool, "https://"+addr+"/readyz", "")
			return err == nil && code == http.StatusOK && body != ""
		}, 20*time.Second, 50*time.Millisecond, "stderr:\n%s", p.stderr.String())
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		requireOK(t, p.wait())
	})
	t.Run("BadFlags", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			says string
		}{
			{[]string{"console", "--table", c.table, "--addr", "127.0.0.1:0", "--tls-cert", certFile}, "--tls-cert needs --tls-key"},
			{[]string{"console", "--table", c.table, "--addr", "127.0.0.1:0", "--tls-key", keyFile}, "--tls-key needs --tls-cert"},
			{[]string{"console", "--table", c.table, "--addr", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--behind-tls-proxy"}, "choose one"},
			{[]string{"console", "--table", c.table, "--addr", "127.0.0.1:0", "--tls-cert", dir + "/missing.pem", "--tls-key", keyFile}, "missing.pem"},
			{[]string{"console", "--table", c.table, "--addr", "127.0.0.1:0", "--tls-cert", keyFile, "--tls-key", keyFile}, keyFile},
			{[]string{"run", "--table", c.table, "--sink", "null:", "--tls-cert", certFile, "--tls-key", keyFile}, "no listener"},
			{[]string{"config", "check", "--sink", "null:", "--metrics-addr", ":9090", "--tls-cert", keyFile, "--tls-key", keyFile}, keyFile},
			{[]string{"config", "check", "--sink", "null:", "--behind-tls-proxy"}, "no listener"},
		} {
			r := c.run(t, tc.args...)
			require.Equal(t, 2, r.code, "%v: %v", tc.args, r)
			require.Contains(t, r.stderr, tc.says, tc.args)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one error line: %s", r.stderr)
		}
	})
}
