package httpsink_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
)

// okTransport answers every request with an empty 204 without touching the
// network, so a benchmark through it measures the sink's own work: building
// the request, http.Client, classifying and draining the response.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		Status: "204 No Content", StatusCode: http.StatusNoContent,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: req,
	}, nil
}

func benchMessage() *outbox.Message {
	m := testMessage(123456789)
	m.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	return m
}

// BenchmarkPublish reports the cost of one delivery. "Sink" goes through a
// transport that answers at once, so its allocs/op are the sink's alone;
// "Loopback" posts to a local server over a kept-alive connection, so its
// allocs/op include the server's side of the exchange. Signed adds the
// Standard Webhooks signature.
func BenchmarkPublish(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	for _, tc := range []struct {
		name string
		url  string
		opts httpsink.Options
	}{
		{"Sink", "http://receiver.invalid/hook", httpsink.Options{Client: &http.Client{Transport: okTransport{}}}},
		{"SinkSigned", "http://receiver.invalid/hook", httpsink.Options{Client: &http.Client{Transport: okTransport{}}, Secrets: []string{secret}}},
		{"Loopback", srv.URL + "/hook", httpsink.Options{}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := httpsink.New(tc.url, &tc.opts)
			require.NoError(b, err)
			b.Cleanup(func() { _ = s.Close() })
			msg := benchMessage()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Publish(ctx, msg); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
