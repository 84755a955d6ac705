package sinktest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of a real broker. Cut makes the broker look
// down (open connections are reset, new ones are closed at once) and Restore
// brings it back, without touching the broker itself.
type Proxy struct {
	upstream string
	ln       net.Listener

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// NewProxy listens on a free 127.0.0.1 port and forwards to upstream. It is
// closed when the test ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("sinktest: proxy listen: %v", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut resets every open connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		reset(c)
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, as a crashed broker's host would send
	}
	_ = c.Close()
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			reset(client)
			continue
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		reset(client)
		return
	}
	if !p.track(server) {
		reset(server)
		reset(client)
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// One direction ended: end both, so neither side hangs half-open.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	<-done
}
