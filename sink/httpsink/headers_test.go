package httpsink_test

import (
	"encoding/base64"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/webhook"
)

func TestPublishPassesMessageHeaders(t *testing.T) {
	t.Parallel()

	srv, got := newCapturingServer(t, http.StatusNoContent)
	s := newSink(t, srv.URL, nil)
	msg := testMessage(3)
	msg.Headers = map[string]string{
		"traceparent":      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":       "vendor=a,other=b",
		"baggage":          "tenant=acme",
		"X-Correlation-ID": "c-1",
		"x-empty":          "",
		"X-Tabbed":         "a\tb",
	}
	before := maps.Clone(msg.Headers)

	require.NoError(t, publish(t, s, msg))

	c := <-got
	require.Equal(t, []string{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, c.header.Values("Traceparent"))
	require.Equal(t, []string{"vendor=a,other=b"}, c.header.Values("Tracestate"))
	require.Equal(t, []string{"tenant=acme"}, c.header.Values("Baggage"))
	require.Equal(t, []string{"c-1"}, c.header.Values("X-Correlation-Id"))
	require.Equal(t, []string{""}, c.header.Values("X-Empty"))
	require.Equal(t, []string{"a\tb"}, c.header.Values("X-Tabbed"))
	// The sink's own headers are all still there.
	require.Equal(t, []string{"3"}, c.header.Values("Idempotency-Key"))
	require.Equal(t, []string{"3"}, c.header.Values("Ce-Id"))
	require.Equal(t, before, msg.Headers, "the message's map was modified")
}

func TestPublishMessageHeadersCannotReplaceTheSinks(t *testing.T) {
	t.Parallel()

	forged := map[string]string{
		"Content-Type":         "text/plain",
		"content-length":       "1",
		"Content-Encoding":     "gzip",
		"Transfer-Encoding":    "chunked",
		"Idempotency-Key":      "forged",
		"ce-id":                "forged",
		"CE-TYPE":              "forged",
		"ce-extension":         "forged", // not set by the sink, still its namespace
		"Outbox-Attempt":       "99",
		"outbox-fencing-token": "99",
		"Outbox-Anything":      "forged",
		"webhook-id":           "forged",
		"Webhook-Timestamp":    "1",
		"webhook-signature":    "v1,Zm9yZ2Vk",
		"Authorization":        "Bearer forged",
		"Proxy-Authorization":  "Basic Zm9yZ2Vk",
		"Host":                 "evil.example",
		"Connection":           "close",
		"Upgrade":              "websocket",
		"Expect":               "100-continue",
		"Accept-Encoding":      "br",
		"Cookie":               "session=forged",
		"X-Tenant":             "forged", // set by Options.Headers
	}
	requireNoneForged := func(t *testing.T, h http.Header) {
		t.Helper()
		for k, v := range forged {
			for _, got := range h.Values(k) {
				require.NotEqual(t, v, got, "message header %s reached the request", k)
			}
		}
		require.Equal(t, []string{"application/json"}, h.Values("Content-Type"))
		require.Equal(t, []string{"7"}, h.Values("Idempotency-Key"))
		require.Equal(t, []string{"7"}, h.Values("Ce-Id"))
		require.Equal(t, []string{"OrderCreated"}, h.Values("Ce-Type"))
		require.Equal(t, []string{"1"}, h.Values("Outbox-Attempt"))
		require.Equal(t, []string{"1"}, h.Values("Outbox-Fencing-Token"))
		require.Equal(t, []string{"acme"}, h.Values("X-Tenant"))
		require.Empty(t, h.Values("Ce-Extension"))
		require.Empty(t, h.Values("Outbox-Anything"))
		require.Empty(t, h.Values("Cookie"))
		require.Empty(t, h.Values("Upgrade"))
	}

	t.Run("Unsigned", func(t *testing.T) {
		t.Parallel()

		var host string
		got := make(chan captured, 1)
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			host = r.Host
			got <- captured{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), nil, r.ContentLength}
		})
		s := newSink(t, srv.URL, &httpsink.Options{Headers: http.Header{"X-Tenant": {"acme"}}})
		msg := testMessage(7)
		msg.Headers = forged

		require.NoError(t, publish(t, s, msg))

		c := <-got
		requireNoneForged(t, c.header)
		require.Empty(t, c.header.Values("Authorization"))
		require.Empty(t, c.header.Values("Webhook-Id"), "an unsigned request carries no webhook-* header")
		require.Empty(t, c.header.Values("Webhook-Signature"))
		require.Equal(t, strings.TrimPrefix(srv.URL, "http://"), host)
		require.Equal(t, int64(len(msg.Payload)), c.contentLength)
	})

	t.Run("SignedWithBasicAuth", func(t *testing.T) {
		t.Parallel()

		secret := randomSecret(t)
		srv, got := newCapturingServer(t, http.StatusNoContent)
		s := newSink(t, strings.Replace(srv.URL, "http://", "http://alice:pw@", 1), &httpsink.Options{
			Secrets: []string{secret},
			Headers: http.Header{"X-Tenant": {"acme"}},
		})
		msg := testMessage(7)
		msg.Headers = forged

		require.NoError(t, publish(t, s, msg))

		c := <-got
		requireNoneForged(t, c.header)
		require.Equal(t, []string{"Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))}, c.header.Values("Authorization"))
		require.Equal(t, []string{"7"}, c.header.Values("Webhook-Id"))
		require.NoError(t, webhook.Verify([]string{secret}, c.header, c.body, 0, time.Now()))
	})
}

func TestPublishSkipsInvalidMessageHeaders(t *testing.T) {
	t.Parallel()

	srv, got := newCapturingServer(t, http.StatusNoContent)
	s := newSink(t, srv.URL, nil)
	msg := testMessage(4)
	msg.Headers = map[string]string{
		"":                 "empty name",
		"Has Space":        "x",
		"Colon:Name":       "x",
		"Ünicode":          "x",
		"X-Injected":       "a\r\nX-Smuggled: yes",
		"X-Nul":            "a\x00b",
		"X-Del":            "a\x7fb",
		"X-Kept":           "ok",
		"X-Unicode-Value":  "café", // bytes >= 0x80 are allowed in values
		"X-Also-Kept!#$&*": "ok",
	}

	// net/http refuses a whole request with one bad header field: had the
	// sink passed these on, the publish would fail.
	require.NoError(t, publish(t, s, msg))
	c := <-got
	require.NoError(t, publish(t, s, testMessage(4)))
	baseline := <-got

	added := map[string][]string{}
	for k, v := range c.header {
		if _, ok := baseline.header[k]; !ok {
			added[k] = v
		}
	}
	require.Equal(t, map[string][]string{
		"X-Kept":           {"ok"},
		"X-Also-Kept!#$&*": {"ok"},
		"X-Unicode-Value":  {"café"},
	}, added)
	require.Equal(t, []string{"", "Colon:Name", "Has Space", "X-Del", "X-Injected", "X-Nul", "Ünicode"}, msg.DroppedHeaders(),
		"each header left out is reported, for the dispatcher's log")
	// NotSent, which the console shows, says the same of each header.
	for k, v := range msg.Headers {
		require.Equal(t, slices.Contains(msg.DroppedHeaders(), k), httpsink.NotSent(k, v) != "", "%q", k)
	}
}

// NotSent names every header the sink will not let a message set.
func TestNotSentNamesTheReservedHeaders(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"Content-Type", "Idempotency-Key", "ce-id", "Outbox-Attempt", "webhook-id", "Authorization", "Host"} {
		require.Equal(t, "a name the webhook sink sets itself or HTTP reserves", httpsink.NotSent(k, "x"), k)
	}
	require.Empty(t, httpsink.NotSent("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
}

func TestPublishMarksAReplay(t *testing.T) {
	t.Parallel()

	srv, got := newCapturingServer(t, http.StatusNoContent)
	s := newSink(t, srv.URL, nil)
	msg := testMessage(5)
	msg.Headers = map[string]string{outbox.ReplayHeader: "fix-1", "traceparent": "00-1"}
	require.NoError(t, publish(t, s, msg))
	c := <-got
	require.Equal(t, []string{"fix-1"}, c.header.Values("Outbox-Replay"))
	require.Equal(t, []string{"5"}, c.header.Values("Idempotency-Key"), "a replay keeps its id")
	require.Equal(t, []string{"00-1"}, c.header.Values("Traceparent"))

	require.NoError(t, publish(t, s, testMessage(6)))
	require.Empty(t, (<-got).header.Values("Outbox-Replay"), "an ordinary delivery is not marked")
}

func TestPublishSendsTheNamespacedID(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t)
	srv, got := newCapturingServer(t, http.StatusNoContent)
	s := newSink(t, srv.URL, &httpsink.Options{Secrets: []string{secret}})
	msg := testMessage(42)
	msg.IDNamespace = "orders"
	require.NoError(t, publish(t, s, msg))

	c := <-got
	for _, h := range []string{"Idempotency-Key", "Ce-Id", "Webhook-Id"} {
		require.Equal(t, []string{"orders:42"}, c.header.Values(h), h)
	}
	require.NoError(t, webhook.Verify([]string{secret}, c.header, c.body, 0, time.Now()), "the signature covers the namespaced id")
}
