package httpsink_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/sink/sinktest"
)

// webhookServer records what it is sent, per path: each path is one
// destination. Paths under /reject/ answer 422.
type webhookServer struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  map[string][]sinktest.Received
	next atomic.Int64
}

func newWebhookServer(t *testing.T) *webhookServer {
	w := &webhookServer{got: map[string][]sinktest.Received{}}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if strings.HasPrefix(req.URL.Path, "/reject/") {
			rw.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		subject, _ := url.PathUnescape(req.Header.Get("ce-subject"))
		w.mu.Lock()
		w.got[req.URL.Path] = append(w.got[req.URL.Path], sinktest.Received{
			ID:      req.Header.Get("Idempotency-Key"),
			Payload: body,
			Meta: map[string]string{
				"event_type":     req.Header.Get("ce-type"),
				"aggregate_type": req.Header.Get("ce-source"),
				"aggregate_id":   subject,
				"fencing_token":  req.Header.Get("Outbox-Fencing-Token"),
				"attempt":        req.Header.Get("Outbox-Attempt"),
			},
		})
		w.mu.Unlock()
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

type pathReceiver struct {
	w    *webhookServer
	path string
}

func (r pathReceiver) Receive(t *testing.T, n int, timeout time.Duration) []sinktest.Received {
	deadline := time.Now().Add(timeout)
	for {
		r.w.mu.Lock()
		got := append([]sinktest.Received(nil), r.w.got[r.path]...)
		r.w.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	w := newWebhookServer(t)
	sinktest.Run(t, sinktest.Harness{
		Upstream: strings.TrimPrefix(w.srv.URL, "http://"),
		New: func(t *testing.T, addr string) (outbox.Sink, sinktest.Receiver) {
			path := fmt.Sprintf("/hook/%d", w.next.Add(1))
			s, err := httpsink.New("http://"+addr+path, nil)
			require.NoError(t, err)
			return s, pathReceiver{w: w, path: path}
		},
		Permanent: func(t *testing.T, addr string) (outbox.Sink, *outbox.Message) {
			s, err := httpsink.New("http://"+addr+"/reject/x", nil)
			require.NoError(t, err)
			return s, sinktest.NewMessage("a")
		},
	})
}

// A receiver that refuses the webhook's credential (401) and then accepts
// it again: every message arrives once it heals, none dead.
func TestCredentialHeals(t *testing.T) {
	t.Parallel()
	w := newWebhookServer(t)
	var refusing atomic.Bool
	gate := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if user, pass, ok := req.BasicAuth(); refusing.Load() || !ok || user != "relay" || pass != "s3cret" {
			rw.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.srv.Config.Handler.ServeHTTP(rw, req)
	}))
	t.Cleanup(gate.Close)
	sinktest.CredentialHeals(t, sinktest.Credential{
		New: func(t *testing.T) (outbox.Sink, sinktest.Receiver) {
			u := strings.Replace(gate.URL, "http://", "http://relay:s3cret@", 1) + "/heals"
			s, err := httpsink.New(u, nil)
			require.NoError(t, err)
			return s, pathReceiver{w: w, path: "/heals"}
		},
		Break: func(*testing.T) { refusing.Store(true) },
		Heal:  func(*testing.T) { refusing.Store(false) },
	})
}
