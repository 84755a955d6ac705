package httpsink_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
)

// A receiver whose certificate does not verify (here: signed by a CA the
// client does not know) is a condition of the endpoint, not of the message.
func TestPublishUntrustedCertificateIsUnavailable(t *testing.T) {
	t.Parallel()

	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(srv.Close)
	s := newSink(t, srv.URL, nil)

	err := publish(t, s, testMessage(1))

	require.Error(t, err)
	require.True(t, outbox.IsUnavailable(err), "want Unavailable: %v", err)
	require.False(t, outbox.IsPermanent(err))
}

// A receiver that demands a client certificate the sink does not present
// refuses the handshake with a TLS alert.
func TestPublishRefusedClientCertificateIsUnavailable(t *testing.T) {
	t.Parallel()

	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	s := newSink(t, srv.URL, &httpsink.Options{Client: srv.Client()})

	err := publish(t, s, testMessage(1))

	require.Error(t, err)
	require.True(t, outbox.IsUnavailable(err), "want Unavailable: %v", err)
}
