package httpsink_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
)

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func newSink(t *testing.T, rawURL string, opts *httpsink.Options) *httpsink.Sink {
	t.Helper()
	s, err := httpsink.New(rawURL, opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func testMessage(id int64) *outbox.Message {
	return &outbox.Message{
		ID:            id,
		AggregateType: "order",
		AggregateID:   "42",
		EventType:     "OrderCreated",
		Payload:       []byte(`{"total": 10}`),
		CreatedAt:     time.Date(2024, 3, 1, 10, 0, 0, 0, time.UTC),
		Attempt:       1,
		FencingToken:  1,
	}
}

func publish(t *testing.T, s *httpsink.Sink, msg *outbox.Message) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Publish(ctx, msg)
}

func TestPublishClassifiesStatus(t *testing.T) {
	t.Parallel()

	now := time.Now()
	httpDate := func(d time.Duration) string { return now.Add(d).UTC().Format(http.TimeFormat) }

	const (
		ok = iota
		retry
		deferred
		permanent
		unavailable
	)
	tests := []struct {
		name       string
		status     int
		retryAfter string
		body       string
		want       int
		// Bounds on RetryableError.After or DeferError.Delay; HTTP-dates
		// have one-second resolution and are read a little after now.
		minDelay, maxDelay time.Duration
	}{
		{name: "OK200", status: 200, want: ok},
		{name: "Created201", status: 201, want: ok},
		{name: "NoContent204", status: 204, want: ok},
		{name: "MovedPermanently301", status: 301, want: permanent},
		{name: "BadRequest400", status: 400, body: `{"error":"invalid order"}`, want: permanent},
		{name: "NotFound404", status: 404, body: "no such hook", want: permanent},
		{name: "RequestTimeout408", status: 408, want: retry},
		{name: "Unauthorized401", status: 401, body: "bad token", want: unavailable},
		{name: "Forbidden403", status: 403, want: unavailable},
		{name: "ProxyAuthRequired407", status: 407, want: unavailable},
		{name: "Conflict409", status: 409, body: "key in progress", want: retry},
		{name: "Conflict409RetryAfter", status: 409, retryAfter: "2", want: retry, minDelay: 2 * time.Second, maxDelay: 2 * time.Second},
		{name: "Gone410", status: 410, want: permanent},
		{name: "UnprocessableEntity422", status: 422, body: "bad total", want: permanent},
		{name: "TooEarly425NoRetryAfter", status: 425, want: deferred, minDelay: 7 * time.Second, maxDelay: 7 * time.Second},
		{name: "TooEarly425InvalidRetryAfter", status: 425, retryAfter: "soon", want: deferred, minDelay: 7 * time.Second, maxDelay: 7 * time.Second},
		{name: "TooEarly425RetryAfterSeconds", status: 425, retryAfter: "30", want: deferred, minDelay: 30 * time.Second, maxDelay: 30 * time.Second},
		{name: "TooEarly425RetryAfterDate", status: 425, retryAfter: httpDate(120 * time.Second), want: deferred, minDelay: 110 * time.Second, maxDelay: 121 * time.Second},
		{name: "TooEarly425RetryAfterPastDate", status: 425, retryAfter: httpDate(-time.Hour), want: deferred},
		{name: "TooManyRequests429RetryAfterSeconds", status: 429, retryAfter: "5", want: retry, minDelay: 5 * time.Second, maxDelay: 5 * time.Second},
		{name: "TooManyRequests429RetryAfterDate", status: 429, retryAfter: httpDate(90 * time.Second), want: retry, minDelay: 80 * time.Second, maxDelay: 91 * time.Second},
		{name: "TooManyRequests429NoRetryAfter", status: 429, want: retry},
		{name: "InternalServerError500", status: 500, body: "boom", want: retry},
		{name: "BadGateway502", status: 502, want: retry},
		{name: "ServiceUnavailable503RetryAfter", status: 503, retryAfter: "3", want: retry, minDelay: 3 * time.Second, maxDelay: 3 * time.Second},
		{name: "ServiceUnavailable503AbsurdRetryAfter", status: 503, retryAfter: "99999999999", want: retry, minDelay: 24 * time.Hour, maxDelay: 24 * time.Hour},
		{name: "GatewayTimeout504", status: 504, want: retry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.retryAfter != "" {
					w.Header().Set("Retry-After", tt.retryAfter)
				}
				if tt.status == 301 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			})
			s := newSink(t, srv.URL, &httpsink.Options{DeferDelay: 7 * time.Second})

			err := publish(t, s, testMessage(1))

			if tt.want == ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), strconv.Itoa(tt.status))
			require.Contains(t, err.Error(), tt.body)
			require.Equal(t, tt.want == retry, outbox.IsRetryable(err), "IsRetryable: %v", err)
			require.Equal(t, tt.want == deferred, outbox.IsDefer(err), "IsDefer: %v", err)
			require.Equal(t, tt.want == permanent, outbox.IsPermanent(err), "IsPermanent: %v", err)
			require.Equal(t, tt.want == unavailable, outbox.IsUnavailable(err), "IsUnavailable: %v", err)

			var got time.Duration
			switch tt.want {
			case retry:
				var re *outbox.RetryableError
				require.ErrorAs(t, err, &re)
				got = re.After
			case deferred:
				var de *outbox.DeferError
				require.ErrorAs(t, err, &de)
				got = de.Delay
			}
			require.GreaterOrEqual(t, got, tt.minDelay)
			require.LessOrEqual(t, got, tt.maxDelay)
		})
	}
}

func TestPublishTooEarlyDefaultDefersToDispatcher(t *testing.T) {
	t.Parallel()

	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooEarly) })
	s := newSink(t, srv.URL, nil)

	err := publish(t, s, testMessage(1))

	var de *outbox.DeferError
	require.ErrorAs(t, err, &de)
	require.Zero(t, de.Delay, "a zero delay lets the dispatcher's DeferDelay apply")
}

func TestPublishDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()

	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/moved", http.StatusFound)
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	t.Run("DefaultClient", func(t *testing.T) {
		t.Parallel()

		err := publish(t, newSink(t, srv.URL+"/hook", nil), testMessage(1))

		require.True(t, outbox.IsPermanent(err), "%v", err)
		require.Contains(t, err.Error(), "302")
	})
	t.Run("CallerClientThatFollows", func(t *testing.T) {
		t.Parallel()

		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return nil }}

		err := publish(t, newSink(t, srv.URL+"/hook", &httpsink.Options{Client: client}), testMessage(1))

		require.True(t, outbox.IsPermanent(err), "%v", err)
		require.NotNil(t, client.CheckRedirect, "the caller's client is not modified")
	})
	t.Cleanup(func() { require.Zero(t, followed.Load()) })
}

type captured struct {
	method, path, query string
	header              http.Header
	body                []byte
	contentLength       int64
}

func TestPublishSendsHeadersAndBody(t *testing.T) {
	t.Parallel()

	got := make(chan captured, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		got <- captured{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body, r.ContentLength}
		w.WriteHeader(http.StatusNoContent)
	})
	s := newSink(t, srv.URL+"/hooks/orders?tenant=a", &httpsink.Options{
		Headers: http.Header{
			"X-Tenant":        {"acme"},
			"Idempotency-Key": {"static-values-cannot-override-this"},
		},
	})
	// Odd spacing, key order, HTML-ish characters and unicode: any
	// re-encoding would change at least one of them.
	payload := []byte(`{ "z":1,"a" : "<b>&amp; caf\u00e9 ☕",  "n":[1.50, 2e3] }`)
	msg := &outbox.Message{
		ID:            9007199254740993,
		AggregateType: "shop\torder\x7f",
		AggregateID:   `Euro € 😀 "q" 100%`,
		EventType:     "Euro € 😀",
		Payload:       payload,
		CreatedAt:     time.Date(2024, 3, 1, 19, 0, 0, 123456000, time.FixedZone("JST", 9*3600)),
		Attempt:       3,
		FencingToken:  17,
	}

	require.NoError(t, publish(t, s, msg))

	c := <-got
	require.Equal(t, http.MethodPost, c.method)
	require.Equal(t, "/hooks/orders", c.path)
	require.Equal(t, "tenant=a", c.query)
	require.Equal(t, payload, c.body)
	require.Equal(t, int64(len(payload)), c.contentLength)
	want := map[string]string{
		"Content-Type":         "application/json",
		"Idempotency-Key":      "9007199254740993",
		"Ce-Specversion":       "1.0",
		"Ce-Id":                "9007199254740993",
		"Ce-Type":              "Euro%20%E2%82%AC%20%F0%9F%98%80", // the spec's own example
		"Ce-Source":            "shop%09order%7F",
		"Ce-Subject":           "Euro%20%E2%82%AC%20%F0%9F%98%80%20%22q%22%20100%25",
		"Ce-Time":              "2024-03-01T10:00:00.123456Z",
		"Outbox-Fencing-Token": "17",
		"Outbox-Attempt":       "3",
		"X-Tenant":             "acme",
	}
	for k, v := range want {
		require.Equal(t, []string{v}, c.header.Values(k), "header %s", k)
	}
	require.Empty(t, c.header.Values("Authorization"))
}

func TestPublishPasswordNeverInErrors(t *testing.T) {
	t.Parallel()

	const (
		password   = "s3cr3t-Pa55"
		pathSecret = "T0KEN-in-path"
	)
	withCreds := func(srvURL string) string {
		return strings.Replace(srvURL, "http://", "http://alice:"+password+"@", 1) + "/hooks/" + pathSecret + "?sig=" + pathSecret
	}
	requireClean := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		require.NotContains(t, err.Error(), password)
		require.NotContains(t, err.Error(), pathSecret)
	}

	t.Run("SentAsBasicAuth", func(t *testing.T) {
		t.Parallel()

		auth := make(chan string, 1)
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { auth <- r.Header.Get("Authorization") })

		require.NoError(t, publish(t, newSink(t, withCreds(srv.URL), nil), testMessage(1)))
		require.Equal(t, "Basic "+base64.StdEncoding.EncodeToString([]byte("alice:"+password)), <-auth)
	})
	for _, status := range []int{http.StatusNotFound, http.StatusTooEarly, http.StatusServiceUnavailable} {
		t.Run("Status"+strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()

			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) })

			requireClean(t, publish(t, newSink(t, withCreds(srv.URL), nil), testMessage(1)))
		})
	}
	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()

		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()

		requireClean(t, publish(t, newSink(t, withCreds(srv.URL), nil), testMessage(1)))
	})
	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()

		srv := newBlockingServer(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()

		requireClean(t, newSink(t, withCreds(srv.URL), nil).Publish(ctx, testMessage(1)))
	})
	t.Run("MalformedURL", func(t *testing.T) {
		t.Parallel()

		for _, raw := range []string{
			"http://alice:" + password + "@[::1",
			"http://alice:" + password + "@host:port/",
			"http://alice:" + password + "@ho st/",
		} {
			_, err := httpsink.New(raw, nil)
			requireClean(t, err)
		}
	})
}

func TestPublishTransportFailuresAreRetryable(t *testing.T) {
	t.Parallel()

	t.Run("ConnectionRefused", func(t *testing.T) {
		t.Parallel()

		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()

		err := publish(t, newSink(t, srv.URL, nil), testMessage(1))

		require.True(t, outbox.IsRetryable(err), "%v", err)
		var opErr *net.OpError
		require.ErrorAs(t, err, &opErr)
	})
	t.Run("DeadlineExceeded", func(t *testing.T) {
		t.Parallel()

		srv := newBlockingServer(t)
		s := newSink(t, srv.URL, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()

		start := time.Now()
		err := s.Publish(ctx, testMessage(1))

		require.True(t, outbox.IsRetryable(err), "%v", err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 5*time.Second, "Publish must return once ctx is done")
	})
	t.Run("Canceled", func(t *testing.T) {
		t.Parallel()

		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()

		err := newSink(t, srv.URL, nil).Publish(ctx, testMessage(1))

		require.True(t, outbox.IsRetryable(err), "%v", err)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// newBlockingServer answers no request until the client gives up on it.
func newBlockingServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	// Registered after srv.Close, so it runs first and no handler is left
	// blocking Close.
	t.Cleanup(func() { close(release) })
	return srv
}

func TestPublishReusesConnections(t *testing.T) {
	t.Parallel()

	var newConns atomic.Int32
	var n atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Alternate successes and failures, both with bodies longer than
		// the error excerpt, so every path has to drain to keep the
		// connection.
		if n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(w, strings.Repeat("x", 4096))
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newSink(t, srv.URL, nil)

	for i := range 50 {
		err := publish(t, s, testMessage(int64(i+1)))
		if i%2 == 0 {
			require.NoError(t, err)
		} else {
			require.True(t, outbox.IsRetryable(err), "%v", err)
		}
	}

	require.Equal(t, int32(50), n.Load())
	require.Equal(t, int32(1), newConns.Load())
}

func TestPublishConcurrent(t *testing.T) {
	t.Parallel()

	var mu sync.Mutex
	seen := make(map[string]string)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")] = string(body)
		mu.Unlock()
	})
	s := newSink(t, srv.URL, nil)

	const goroutines, perGoroutine = 20, 10
	errs := make(chan error, goroutines*perGoroutine)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range perGoroutine {
				id := int64(g*perGoroutine + i + 1)
				msg := testMessage(id)
				msg.Payload = fmt.Appendf(nil, `{"id":%d}`, id)
				errs <- s.Publish(context.Background(), msg)
			}
		})
	}
	wg.Wait()
	close(errs)

	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, seen, goroutines*perGoroutine)
	for id, body := range seen {
		require.Equal(t, `{"id":`+id+`}`, body)
	}
}

func TestPublishErrorBodyExcerpt(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name         string
		body         string
		maxErrorBody int
		wantContains string
		wantMissing  string
	}{
		{
			name:         "DefaultLimit",
			body:         strings.Repeat("x", 1000),
			wantContains: strings.Repeat("x", 256) + "…",
			wantMissing:  strings.Repeat("x", 257),
		},
		{
			name:         "CutOnRuneBoundary",
			body:         strings.Repeat("é", 300),
			maxErrorBody: 255, // mid-rune: 127 whole runes fit
			wantContains: strings.Repeat("é", 127) + "…",
			wantMissing:  strings.Repeat("é", 128),
		},
		{
			name:         "ShortBodyNotCut",
			body:         "nope",
			wantContains: "Bad Request: nope",
			wantMissing:  "…",
		},
		{
			name:         "ControlCharactersFlattened",
			body:         "line one\r\nline\ttwo\n",
			wantContains: "Bad Request: line one  line two",
			wantMissing:  "\n",
		},
		{
			name:         "InvalidUTF8Replaced",
			body:         "bad \xff\xfe byte",
			wantContains: "bad \uFFFD byte",
		},
		{
			name:         "NegativeKeepsNone",
			body:         "secret detail",
			maxErrorBody: -1,
			wantContains: "HTTP 400",
			wantMissing:  "secret",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, tt.body)
			})
			s := newSink(t, srv.URL, &httpsink.Options{MaxErrorBody: tt.maxErrorBody})

			err := publish(t, s, testMessage(1))

			require.True(t, outbox.IsPermanent(err), "%v", err)
			require.True(t, utf8.ValidString(err.Error()))
			require.Contains(t, err.Error(), tt.wantContains)
			if tt.wantMissing != "" {
				require.NotContains(t, err.Error(), tt.wantMissing)
			}
		})
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		rawURL string
		want   string
	}{
		{"ftp://x", `unsupported URL scheme "ftp"`},
		{"mailto:hooks@example.com", `unsupported URL scheme "mailto"`},
		{"http://[::1", "malformed URL"},
		{"http://example.com/%zz", "malformed URL"},
		{"", "no scheme"},
		{"example.com/hook", "no scheme"},
		{"http://", "no host"},
		{"https:opaque", "no host"},
	}
	for _, tt := range tests {
		t.Run(tt.rawURL, func(t *testing.T) {
			t.Parallel()

			s, err := httpsink.New(tt.rawURL, nil)

			require.Nil(t, s)
			require.ErrorContains(t, err, tt.want)
		})
	}
	t.Run("NegativeDeferDelay", func(t *testing.T) {
		t.Parallel()

		_, err := httpsink.New("http://example.com", &httpsink.Options{DeferDelay: -time.Second})

		require.ErrorContains(t, err, "DeferDelay")
	})
	t.Run("AcceptsHTTPS", func(t *testing.T) {
		t.Parallel()

		s, err := httpsink.New("https://example.com/hook", nil)

		require.NoError(t, err)
		require.NoError(t, s.Close())
	})
}

func TestPublishUnreachableIsNotPermanent(t *testing.T) {
	t.Parallel()

	// A non-routable TEST-NET-1 address with a short ctx: whatever the
	// network does (drop, refuse, unreachable), the outcome is retryable.
	s := newSink(t, "http://192.0.2.1:9/hook", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	err := s.Publish(ctx, testMessage(1))

	require.True(t, outbox.IsRetryable(err), "%v", err)
}
