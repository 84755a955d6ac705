package httpsink_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// closingServer answers each request with 204 and then closes the
// connection without saying so (no Connection: close), as a server does
// whose keep-alive timeout is shorter than the client's idle time.
func closingServer(t *testing.T) (url string, requests *atomic.Int32, conns *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	requests, conns = new(atomic.Int32), new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				requests.Add(1)
				_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/hook", requests, conns
}

// A kept-alive connection the server closed while idle costs a new
// connection, not a failed delivery, and the request arrives once.
func TestPublishAfterServerClosedIdleConnection(t *testing.T) {
	t.Parallel()
	url, requests, conns := closingServer(t)
	s := newSink(t, url, nil)
	for i := range 3 {
		require.NoError(t, publish(t, s, testMessage(int64(i+1))))
	}
	require.Equal(t, int32(3), requests.Load(), "each delivery arrived once")
	require.Equal(t, int32(3), conns.Load())
}

// A response with Connection: close is the connection's last.
func TestPublishConnectionClose(t *testing.T) {
	t.Parallel()
	var newConns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			newConns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s := newSink(t, srv.URL, nil)
	for i := range 3 {
		require.NoError(t, publish(t, s, testMessage(int64(i+1))))
	}
	require.Equal(t, int32(3), newConns.Load())
}

// Cancelling the publish ends a request the receiver sits on at once, as a
// retryable error carrying the context's, and the next publish works.
func TestPublishCancelledMidRequest(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int32
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			<-release
		}
	})
	t.Cleanup(func() { close(release) })
	s := newSink(t, srv.URL, nil)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := s.Publish(ctx, testMessage(1))
	require.True(t, outbox.IsRetryable(err), "%v", err)
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second)

	require.NoError(t, publish(t, s, testMessage(2)))
}

// With a proxy in the environment the sink goes through it. The check runs
// in a child process: net/http reads the proxy variables once per process.
func TestPublishHonoursProxyEnvironment(t *testing.T) {
	if os.Getenv("HTTPSINK_PROXY_CHILD") == "1" {
		s := newSink(t, "http://receiver.invalid/hook", nil)
		require.NoError(t, publish(t, s, testMessage(7)))
		return
	}
	t.Parallel()
	var proxied atomic.Value
	proxy := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		proxied.Store(r.Method + " " + r.URL.String() + " " + r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusNoContent)
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestPublishHonoursProxyEnvironment$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HTTPSINK_PROXY_CHILD=1", "HTTP_PROXY="+proxy.URL, "http_proxy="+proxy.URL, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		require.FailNow(t, "child failed", "%s", out)
	}
	require.NoError(t, err)
	require.Equal(t, "POST http://receiver.invalid/hook 7", proxied.Load())
}

// Check goes through the sink's own transport too.
func TestCheckOwnTransport(t *testing.T) {
	t.Parallel()
	var method atomic.Value
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		method.Store(r.Method)
		w.WriteHeader(http.StatusMethodNotAllowed)
	})
	checks := httpsink.Check(context.Background(), srv.URL+"/hook")
	require.NotEmpty(t, checks)
	for _, c := range checks {
		require.NoError(t, c.Err, c.What)
	}
	require.Equal(t, http.MethodHead, method.Load())
}

// A receiver that sends headers without end gets a retryable error, not
// the relay's memory.
func TestPublishEndlessResponseHeaders(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = http.ReadRequest(bufio.NewReader(c))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"
		for range 4096 { // 4 MB of headers
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	}()
	s := newSink(t, "http://"+ln.Addr().String()+"/hook", nil)
	err = publish(t, s, testMessage(1))
	require.True(t, outbox.IsRetryable(err), "%v", err)
	require.ErrorContains(t, err, "larger than 1 MiB")
}

// A path nothing answers at fails the check, unless OPTIONS shows it takes
// POST (a framework that answers HEAD on a POST-only route with 404).
func TestCheckNotFound(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/post-only" && r.Method == http.MethodOptions:
			w.Header().Set("Allow", "POST")
			w.WriteHeader(http.StatusOK)
		case r.URL.Path == "/gone":
			w.WriteHeader(http.StatusGone)
		default:
			http.NotFound(w, r)
		}
	})
	endpoint := func(path string) sinkutil.Check {
		checks := httpsink.Check(context.Background(), srv.URL+path)
		require.Len(t, checks, 2)
		require.NoError(t, checks[0].Err, checks[0].What)
		return checks[1]
	}
	for _, path := range []string{"/hok", "/gone"} {
		c := endpoint(path)
		require.Error(t, c.Err, path)
		require.Contains(t, c.Err.Error(), "to HEAD")
		require.Contains(t, c.Fix, "correct the path")
	}
	c := endpoint("/post-only")
	require.NoError(t, c.Err)
	require.Equal(t, "HEAD answered 404 Not Found, OPTIONS allows POST", c.Note)
}
