package service

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/testio"
)

// served is the common name of the certificate a TLS client is shown.
func served(t *testing.T, addr string) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads what is served
	require.NoError(t, err)
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

// A renewed pair is served from the first handshake a second after it was
// written; a pair that does not load (a key of another certificate) leaves
// the one served; a missing file or a mismatched pair at the start is one
// error naming the file.
func TestCertificateReloadsWhenTheFilesChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, _ := testio.SelfSigned(t, "first")
	certFile, keyFile := testio.WriteCert(t, dir, first)
	c, err := LoadCertificate(certFile, keyFile, nil)
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := HTTPServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	srv.TLSConfig = c.Config()
	go func() { _ = Serve(srv, ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	require.Equal(t, "first", served(t, addr))

	second, _ := testio.SelfSigned(t, "second")
	testio.WriteCert(t, dir, second)
	require.Eventually(t, func() bool { return served(t, addr) == "second" }, 5*time.Second, 100*time.Millisecond)

	// Half a renewal: the certificate of a third pair, the key still the
	// second's. The second stays served.
	third, _ := testio.SelfSigned(t, "third")
	certPEM, _ := testio.PEM(t, third)
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	c.mu.Lock()
	c.checked = time.Time{} // the next handshake looks at the files
	c.mu.Unlock()
	require.Equal(t, "second", served(t, addr))
	require.Error(t, c.Reload())
	require.Equal(t, "second", served(t, addr))

	_, err = LoadCertificate(certFile, keyFile, nil)
	require.ErrorContains(t, err, certFile)
	_, err = LoadCertificate(filepath.Join(dir, "none.pem"), keyFile, nil)
	require.ErrorContains(t, err, "none.pem")
}

// SIGHUP reads the pair again, changed or not since the last handshake.
func TestCertificateReloadsOnHangup(t *testing.T) {
	dir := t.TempDir()
	first, _ := testio.SelfSigned(t, "first")
	certFile, keyFile := testio.WriteCert(t, dir, first)
	c, err := LoadCertificate(certFile, keyFile, nil)
	require.NoError(t, err)
	stop := c.ReloadOnHangup(t.Context())
	defer stop()
	second, _ := testio.SelfSigned(t, "second")
	testio.WriteCert(t, dir, second)
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.cert.Leaf.Subject.CommonName == "second"
	}, 5*time.Second, 20*time.Millisecond)
}
