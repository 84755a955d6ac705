package kafkasink_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testio"
	"github.com/outboxd/outbox/sink/kafkasink"
	"github.com/outboxd/outbox/sink/sinktest"
)

// selfSigned returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kfake"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestTLS(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	c := newCluster(t, kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), kfake.SeedTopics(1, "t"))
	addr := clusterAddr(c)

	t.Run("TLSConfig", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, "kafka://"+addr+"?topic=t", &kafkasink.Options{TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
		require.NoError(t, publish(t, s, sinktest.NewMessage("a"), 10*time.Second))
	})
	t.Run("TLSConfigOverCustomDialer", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, "kafka://"+addr+"?topic=t", &kafkasink.Options{
			TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			Dialer:    viaAddr(addr),
		})
		require.NoError(t, publish(t, s, sinktest.NewMessage("a"), 10*time.Second))
	})
	t.Run("UntrustedCertificateIsUnavailable", func(t *testing.T) {
		t.Parallel()
		// The certificate is not in the system roots; the client's log
		// shows that tls=true did try TLS.
		var log testio.Buffer
		s := newSink(t, "kafka://"+addr+"?tls=true&topic=t", &kafkasink.Options{
			Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})),
		})
		err := publish(t, s, sinktest.NewMessage("a"), 5*time.Second)
		require.True(t, outbox.IsUnavailable(err), "want unavailable, got %v", err)
		require.Contains(t, err.Error(), "x509")
	})
	t.Run("PlaintextToTLSListenerIsRetryable", func(t *testing.T) {
		t.Parallel()
		s := newSink(t, "kafka://"+addr+"?topic=t", nil)
		err := publish(t, s, sinktest.NewMessage("a"), time.Second)
		require.True(t, outbox.IsRetryable(err), "want retryable, got %v", err)
	})
}
