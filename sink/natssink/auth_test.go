package natssink_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testio"
	"github.com/outboxd/outbox/sink/natssink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func tlsConfigStub() *tls.Config { return &tls.Config{MinVersion: tls.VersionTLS12} }

const authConfig = `authorization {
  users = [
    {user: alice, password: "hunter2-pw", permissions: {publish: {deny: ["denied.>"]}}}
  ]
}`

// TestAuth runs against a private server that wants a user and password
// and denies publishing to denied.>.
func TestAuth(t *testing.T) {
	t.Parallel()
	addr := startServer(t, authConfig)
	js := admin(t, addr, nats.UserInfo("alice", "hunter2-pw"))

	t.Run("UserPassword", func(t *testing.T) {
		t.Parallel()
		prefix, stream := newStream(t, js, nil)
		s := newSink(t, "nats://alice:hunter2-pw@"+addr+"?subject="+prefix+".x", nil)
		m := sinktest.NewMessage("a")
		require.NoError(t, s.Publish(t.Context(), m))
		got := newReceiver(js, stream).Receive(t, 1, 5*time.Second)
		require.Len(t, got, 1)
		require.Equal(t, m.IDString(), got[0].ID)
	})

	t.Run("WrongPasswordIsUnavailable", func(t *testing.T) {
		t.Parallel()
		prefix, _ := newStream(t, js, nil)
		s := newSink(t, "nats://alice:wrong-pw@"+addr+"?subject="+prefix+".x", nil)
		// The first publish may start before the client has reported the
		// failed handshake: the report ends its wait for the connection.
		for range 2 {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			err := s.Publish(ctx, sinktest.NewMessage("a"))
			cancel()
			require.True(t, outbox.IsUnavailable(err), "got %v", err)
			require.ErrorIs(t, err, nats.ErrAuthorization)
			require.NotContains(t, err.Error(), "wrong-pw")
		}
	})

	t.Run("NoCredentialsIsUnavailable", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, "nats://"+addr+"?subject=x", nil)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		err := s.Publish(ctx, sinktest.NewMessage("a"))
		require.True(t, outbox.IsUnavailable(err), "got %v", err)
	})

	t.Run("PermissionViolationIsUnavailable", func(t *testing.T) {
		t.Parallel()
		// A stream takes the subject, so only the permission stands in the
		// way.
		_, _ = newStream(t, js, func(c *jetstream.StreamConfig) { c.Subjects = []string{"denied.>"} })
		s := newSink(t, "nats://alice:hunter2-pw@"+addr+"?subject=denied.{event_type}", nil)
		start := time.Now()
		err := s.Publish(t.Context(), sinktest.NewMessage("a"))
		require.True(t, outbox.IsUnavailable(err), "got %v", err)
		require.ErrorIs(t, err, nats.ErrPermissionViolation)
		require.Less(t, time.Since(start), 5*time.Second, "the violation must not wait for the timeout")
	})
}

// TestTLS connects with tls:// to a private server whose certificate is
// signed by a CA handed over in Options.TLSConfig.
func TestTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pool := writeCert(t, dir)
	addr := startServer(t, fmt.Sprintf("tls { cert_file: %q, key_file: %q }",
		filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")))
	js := admin(t, addr, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
	prefix, stream := newStream(t, js, nil)

	for _, scheme := range []string{"tls", "nats+tls"} {
		s := newSink(t, scheme+"://"+addr+"?subject="+prefix+".x",
			&natssink.Options{TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
		require.NoError(t, s.Publish(t.Context(), sinktest.NewMessage("a")), scheme)
	}
	require.Len(t, newReceiver(js, stream).Receive(t, 2, 5*time.Second), 2)

	// Without the CA the certificate is not trusted: the sink is
	// unavailable (the first publish may start before the client has
	// reported the failed handshake).
	s := newSink(t, "tls://"+addr+"?subject="+prefix+".x", nil)
	for range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		err := s.Publish(ctx, sinktest.NewMessage("a"))
		cancel()
		require.True(t, outbox.IsUnavailable(err), "got %v", err)
	}
}

// writeCert writes a self-signed certificate for 127.0.0.1 to dir
// (cert.pem, key.pem) and returns a pool trusting it.
func writeCert(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	cert, pool := testio.SelfSigned(t, "natssink test")
	certPEM, keyPEM := testio.PEM(t, cert)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cert.pem"), certPEM, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "key.pem"), keyPEM, 0o600))
	return pool
}
