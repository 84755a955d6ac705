package kafkasink_test

import (
	"crypto/tls"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testio"
	"github.com/outboxd/outbox/sink/kafkasink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestTLS(t *testing.T) {
	t.Parallel()
	cert, pool := testio.SelfSigned(t, "kfake")
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
