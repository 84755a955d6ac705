package httpsink_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/webhook"
)

func randomSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// newCapturingServer hands every request it receives to the test.
func newCapturingServer(t *testing.T, status int) (*httptest.Server, <-chan captured) {
	t.Helper()
	got := make(chan captured, 16)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		got <- captured{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body, r.ContentLength}
		w.WriteHeader(status)
	})
	return srv, got
}

func TestPublishSignsStandardWebhooks(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t)
	srv, got := newCapturingServer(t, http.StatusNoContent)
	s := newSink(t, srv.URL, &httpsink.Options{Secrets: []string{secret}})
	msg := testMessage(9007199254740993)
	msg.Payload = []byte(`{ "z":1, "a": "caf\u00e9 ☕" }`)

	before := time.Now().Unix()
	require.NoError(t, publish(t, s, msg))
	after := time.Now().Unix()

	c := <-got
	require.Equal(t, []string{"9007199254740993"}, c.header.Values("webhook-id"))
	ts, err := strconv.ParseInt(c.header.Get("webhook-timestamp"), 10, 64)
	require.NoError(t, err)
	// Send time, not CreatedAt (2024): a retry days later must still pass
	// the receiver's replay window.
	require.GreaterOrEqual(t, ts, before)
	require.LessOrEqual(t, ts, after)
	require.Len(t, c.header.Values("webhook-signature"), 1)
	require.Len(t, strings.Fields(c.header.Get("webhook-signature")), 1)
	require.NoError(t, webhook.Verify([]string{secret}, c.header, c.body, 0, time.Now()))
	require.ErrorIs(t, webhook.Verify([]string{randomSecret(t)}, c.header, c.body, 0, time.Now()), webhook.ErrInvalidSignature)

	// The existing headers are still there.
	require.Equal(t, "9007199254740993", c.header.Get("Idempotency-Key"))
	require.Equal(t, "9007199254740993", c.header.Get("Ce-Id"))
	require.Equal(t, "1.0", c.header.Get("Ce-Specversion"))
	require.Equal(t, []byte(msg.Payload), c.body)
}

func TestPublishUnsignedWithoutSecrets(t *testing.T) {
	t.Parallel()

	srv, got := newCapturingServer(t, http.StatusNoContent)

	require.NoError(t, publish(t, newSink(t, srv.URL, nil), testMessage(1)))

	c := <-got
	for _, k := range []string{"webhook-id", "webhook-timestamp", "webhook-signature"} {
		require.Empty(t, c.header.Values(k), k)
	}
}

func TestPublishSignsWithEverySecret(t *testing.T) {
	t.Parallel()

	oldSecret, newSecret, otherSecret := randomSecret(t), randomSecret(t), randomSecret(t)
	srv, got := newCapturingServer(t, http.StatusNoContent)
	s := newSink(t, srv.URL, &httpsink.Options{Secrets: []string{newSecret, oldSecret}})

	require.NoError(t, publish(t, s, testMessage(5)))

	c := <-got
	require.Len(t, strings.Fields(c.header.Get("webhook-signature")), 2)
	for _, receiver := range [][]string{{oldSecret}, {newSecret}, {otherSecret, oldSecret}} {
		require.NoError(t, webhook.Verify(receiver, c.header, c.body, 0, time.Now()))
	}
	require.ErrorIs(t, webhook.Verify([]string{otherSecret}, c.header, c.body, 0, time.Now()), webhook.ErrInvalidSignature)
}

func TestPublishStaticHeadersCannotForgeSignature(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t)
	srv, got := newCapturingServer(t, http.StatusNoContent)
	s := newSink(t, srv.URL, &httpsink.Options{
		Secrets: []string{secret},
		Headers: http.Header{
			"Webhook-Id":        {"forged"},
			"Webhook-Timestamp": {"1"},
			"Webhook-Signature": {"v1,Zm9yZ2Vk"},
		},
	})

	require.NoError(t, publish(t, s, testMessage(8)))

	c := <-got
	require.Equal(t, []string{"8"}, c.header.Values("webhook-id"))
	require.Len(t, c.header.Values("webhook-timestamp"), 1)
	require.NotContains(t, c.header.Get("webhook-signature"), "Zm9yZ2Vk")
	require.NoError(t, webhook.Verify([]string{secret}, c.header, c.body, 0, time.Now()))
}

func TestPublishSignedConcurrent(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t)
	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	var mu sync.Mutex
	verified := map[string]string{}
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := v.Verify(r)
		if err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		verified[r.Header.Get(webhook.HeaderID)] = string(body)
		mu.Unlock()
	})
	s := newSink(t, srv.URL, &httpsink.Options{Secrets: []string{secret}})

	const n = 40
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			msg := testMessage(int64(i + 1))
			msg.Payload = []byte(`{"i":` + strconv.Itoa(i+1) + `}`)
			errs <- publish(t, s, msg)
		})
	}
	wg.Wait()
	close(errs)

	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, verified, n)
	for id, body := range verified {
		require.Equal(t, `{"i":`+id+`}`, body)
	}
}

func TestSecretsNeverInErrors(t *testing.T) {
	t.Parallel()

	// Distinctive, so an echo of a fragment is caught too.
	const encoded = "U2VjcmV0U2VjcmV0U2VjcmV0U2VjcmV0"
	secret := webhook.SecretPrefix + encoded
	requireClean := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		for _, f := range []string{secret, encoded, encoded[:12], encoded[len(encoded)-12:], "SecretSecret"} {
			require.NotContains(t, err.Error(), f)
		}
	}

	t.Run("MalformedSecrets", func(t *testing.T) {
		t.Parallel()

		for _, secrets := range [][]string{
			{encoded},
			{secret[:len(secret)-4]},
			{strings.Replace(secret, "U2Vj", "U2V!", 1)},
			{secret, ""},
		} {
			s, err := httpsink.New("http://example.com/hook", &httpsink.Options{Secrets: secrets})

			require.Nil(t, s)
			require.ErrorContains(t, err, "httpsink: Secrets: webhook: secret")
			requireClean(t, err)
		}
	})
	t.Run("SecretInURL", func(t *testing.T) {
		t.Parallel()

		for _, raw := range []string{
			"https://example.com/hook?secret=" + secret,
			"https://example.com/hook?secret=" + strings.ToUpper(secret),
			"https://example.com/hooks/" + secret,
			"https://user:" + secret + "@example.com/hook",
			"https://example.com/hook#" + secret,
			"http://[::1/hook?secret=" + secret, // malformed as well
		} {
			s, err := httpsink.New(raw, &httpsink.Options{Secrets: []string{secret}})

			require.Nil(t, s)
			require.ErrorContains(t, err, "Options.Secrets")
			requireClean(t, err)
		}
	})
	for _, status := range []int{http.StatusUnauthorized, http.StatusTooEarly, http.StatusServiceUnavailable} {
		t.Run("Status"+strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()

			// A receiver that echoes the request's headers in its error
			// body still cannot make the secret appear: it never travels.
			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				_ = r.Header.Write(w)
			})
			s := newSink(t, srv.URL, &httpsink.Options{Secrets: []string{secret}, MaxErrorBody: 4096})

			err := publish(t, s, testMessage(1))

			require.Contains(t, err.Error(), "Webhook-Signature: v1,", "the echo reached the error")
			requireClean(t, err)
		})
	}
	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()

		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		s := newSink(t, srv.URL, &httpsink.Options{Secrets: []string{secret}})

		err := publish(t, s, testMessage(1))

		require.True(t, outbox.IsRetryable(err), "%v", err)
		requireClean(t, err)
	})
	t.Run("Canceled", func(t *testing.T) {
		t.Parallel()

		srv := newBlockingServer(t)
		s := newSink(t, srv.URL, &httpsink.Options{Secrets: []string{secret}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()

		requireClean(t, s.Publish(ctx, testMessage(1)))
	})
}
