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
	got  map[string]*sinktest.Collector
	next atomic.Int64
}

// at is the collector of path's deliveries.
func (w *webhookServer) at(path string) *sinktest.Collector {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.got[path]
	if !ok {
		c = sinktest.NewCollector()
		w.got[path] = c
	}
	return c
}

func newWebhookServer(t *testing.T) *webhookServer {
	w := &webhookServer{got: map[string]*sinktest.Collector{}}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		if strings.HasPrefix(req.URL.Path, "/reject/") {
			rw.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		subject, _ := url.PathUnescape(req.Header.Get("ce-subject"))
		w.at(req.URL.Path).Add(sinktest.Received{
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
		rw.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(w.srv.Close)
	return w
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
			return s, w.at(path)
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
			return s, w.at("/heals")
		},
		Break: func(*testing.T) { refusing.Store(true) },
		Heal:  func(*testing.T) { refusing.Store(false) },
	})
}
