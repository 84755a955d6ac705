package httpsink

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// h1Transport is the transport a Sink builds for itself: HTTP/1.1 over
// kept-alive connections to the one origin the sink posts to, with the
// request written and the response read on the publishing goroutine.
// net/http's Transport hands every request to two goroutines of the
// connection (a writer and a reader) and back, which costs a delivery more
// CPU than building, writing and parsing it; a webhook sink has one origin,
// no proxy (New falls back to net/http when the environment names one) and
// one request per connection at a time, so it needs none of that. Framing
// is net/http's own: [http.Request.Write] and [http.ReadResponse].
type h1Transport struct {
	addr        string      // host:port to dial
	tls         *tls.Config // nil for http://
	dialer      net.Dialer
	maxIdle     int
	idleTimeout time.Duration

	mu     sync.Mutex
	idle   []*h1Conn // most recently used last
	closed bool
}

// maxResponseHead bounds a response's status line and headers, as
// net/http's Transport.MaxResponseHeaderBytes does: a receiver sending
// headers without end must not exhaust the relay's memory.
const maxResponseHead = 1 << 20

// h1Conn is one connection and its buffers.
type h1Conn struct {
	t        *h1Transport
	nc       net.Conn
	lim      *headLimit // between nc and br
	br       *bufio.Reader
	bw       *bufio.Writer
	lastUsed time.Time
}

func newH1Transport(host, port string, useTLS bool) *h1Transport {
	t := &h1Transport{
		addr:        net.JoinHostPort(host, port),
		dialer:      net.Dialer{Timeout: DialTimeoutDefault, KeepAlive: 30 * time.Second},
		maxIdle:     MaxIdleConnsPerHostDefault,
		idleTimeout: IdleConnTimeoutDefault,
	}
	if useTLS {
		t.tls = &tls.Config{ServerName: host, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	}
	return t
}

// RoundTrip sends req on an idle connection, or a new one. A kept-alive
// connection the server closed while it sat idle fails before any byte of
// a response arrives; the request is then sent once more on a new
// connection, as net/http does for a request with an Idempotency-Key.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for fresh := false; ; fresh = true {
		c, reused, err := t.conn(ctx, fresh)
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		resp, err := c.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		c.close()
		var stale staleError
		if !reused || !errors.As(err, &stale) || req.GetBody == nil {
			return nil, ctxErr(ctx, err)
		}
		if req.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
}

// staleError is a failure before any byte of a response arrived, which on
// a kept-alive connection means the server closed it while it was idle.
type staleError struct{ err error }

func (e staleError) Error() string { return e.err.Error() }
func (e staleError) Unwrap() error { return e.err }

// roundTrip writes req and reads the response head. The response's body
// gives the connection back when read to its end and closed.
func (c *h1Conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	deadline, _ := ctx.Deadline()
	if err := c.nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	resp, err := c.exchange(req)
	if err != nil {
		stop()
		return nil, err
	}
	resp.Body = &h1Body{rc: resp.Body, c: c, stop: stop, reuse: !resp.Close}
	return resp, nil
}

func (c *h1Conn) exchange(req *http.Request) (*http.Response, error) {
	if err := req.Write(c.bw); err != nil {
		return nil, staleError{err}
	}
	if err := c.bw.Flush(); err != nil {
		return nil, staleError{err}
	}
	c.lim.left = maxResponseHead
	defer func() { c.lim.left = math.MaxInt64 }()
	for {
		if _, err := c.br.Peek(1); err != nil {
			return nil, staleError{err}
		}
		resp, err := http.ReadResponse(c.br, req)
		if err != nil {
			return nil, err
		}
		// Interim responses (102, 103) precede the real one; 101 would
		// switch protocols, which a POST without Upgrade never asks for.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// conn returns an idle connection unless fresh is set, else dials one.
func (t *h1Transport) conn(ctx context.Context, fresh bool) (*h1Conn, bool, error) {
	if !fresh {
		if c := t.takeIdle(); c != nil {
			return c, true, nil
		}
	}
	nc, err := t.dialer.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, false, err
	}
	if t.tls != nil {
		tc := tls.Client(nc, t.tls)
		hctx, cancel := context.WithTimeout(ctx, TLSHandshakeTimeoutDefault)
		err = tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			_ = nc.Close()
			return nil, false, err
		}
		nc = tc
	}
	lim := &headLimit{r: nc, left: math.MaxInt64}
	return &h1Conn{t: t, nc: nc, lim: lim, br: bufio.NewReaderSize(lim, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10)}, false, nil
}

func (t *h1Transport) takeIdle() *h1Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	for n := len(t.idle); n > 0; n = len(t.idle) {
		c := t.idle[n-1]
		t.idle = t.idle[:n-1]
		if time.Since(c.lastUsed) < t.idleTimeout {
			return c
		}
		_ = c.nc.Close()
	}
	return nil
}

// put keeps c for the next request, or closes it past maxIdle.
func (t *h1Transport) put(c *h1Conn) {
	c.lastUsed = time.Now()
	t.mu.Lock()
	if !t.closed && len(t.idle) < t.maxIdle {
		t.idle = append(t.idle, c)
		c = nil
	}
	t.mu.Unlock()
	if c != nil {
		_ = c.nc.Close()
	}
}

func (c *h1Conn) close() { _ = c.nc.Close() }

// CloseIdleConnections closes the idle connections and every connection
// given back from now on.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.closed = nil, true
	t.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
}

// h1Body is a response body; closing it after reading it to its end gives
// the connection back, closing it earlier closes the connection.
type h1Body struct {
	rc    io.ReadCloser
	c     *h1Conn
	stop  func() bool
	reuse bool
	eof   bool
	done  bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.eof = true
	} else if err != nil {
		b.reuse = false
	}
	return n, err
}

func (b *h1Body) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if !b.eof && b.reuse {
		// An empty body nobody read: one read tells it ended.
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err == io.EOF {
			b.eof = true
		}
	}
	err := b.rc.Close()
	// A deadline the cancellation already set leaves the connection
	// unusable: stop reports false then.
	if b.stop() && b.eof && b.reuse && err == nil && b.c.br.Buffered() == 0 {
		b.c.t.put(b.c)
		return nil
	}
	b.c.close()
	return err
}

// ctxErr prefers the context's error to the deadline error it caused (the
// connection's deadline, set from the context's, may fire first).
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}

// headLimit fails reads once left bytes were read.
type headLimit struct {
	r    io.Reader
	left int64
}

var errHeadTooLarge = errors.New("response head larger than 1 MiB")

func (l *headLimit) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errHeadTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}
