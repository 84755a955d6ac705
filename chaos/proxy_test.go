//go:build chaos

package chaos

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"time"
)

// linkState is what a proxy does with traffic.
type linkState int

const (
	linkUp        linkState = iota
	linkBlackHole           // connections stay open, nothing is forwarded
	linkCut                 // connections are reset, new ones refused
	// linkAuthRefuse: connections are reset, and new ones meet a NATS
	// server that refuses their credentials, as after a rotation.
	linkAuthRefuse
)

func (s linkState) String() string { return [...]string{"up", "black-hole", "cut", "auth-refuse"}[s] }

// proxy is a TCP proxy on one link (a worker to PostgreSQL, or a worker to
// the sink) that can black-hole, cut and reset it. Unlike a closed port, a
// black hole leaves both ends waiting: bytes are read but held until the
// link comes back, as a network partition with TCP retransmits would.
type proxy struct {
	name     string
	upstream string
	ln       net.Listener

	mu      sync.Mutex
	state   linkState
	changed chan struct{} // closed and replaced on every state change
	links   map[*link]struct{}
	closed  bool
	wg      sync.WaitGroup
}

type link struct {
	client, server net.Conn
	mu             sync.Mutex
	dead           bool
}

func newProxy(name, upstream string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{name: name, upstream: upstream, ln: ln, changed: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

// SetUpstream points new links at addr, as a virtual IP or a DNS name
// moves to the new primary after a failover; links open to the old
// upstream are left to fail with it.
func (p *proxy) SetUpstream(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.upstream = addr
}

func (p *proxy) setState(s linkState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = s
	close(p.changed)
	p.changed = make(chan struct{})
	if s == linkCut || s == linkAuthRefuse {
		for l := range p.links {
			l.reset()
		}
	}
}

// BlackHole stops forwarding until Restore.
func (p *proxy) BlackHole() { p.setState(linkBlackHole) }

// Cut resets every open connection and refuses new ones until Restore.
func (p *proxy) Cut() { p.setState(linkCut) }

// RefuseAuth resets every open connection and answers new ones, as a NATS
// server, "Authorization Violation" until Restore.
func (p *proxy) RefuseAuth() { p.setState(linkAuthRefuse) }

// Restore forwards again; black-holed connections resume where they were.
func (p *proxy) Restore() { p.setState(linkUp) }

// Reset resets every open connection once, leaving the link up.
func (p *proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.reset()
	}
}

func (p *proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.setState(linkCut)
	p.wg.Wait()
}

func (l *link) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dead = true
	for _, c := range []net.Conn{l.client, l.server} {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, as a dropped route eventually yields
		}
		_ = c.Close()
	}
}

func (l *link) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// waitUp blocks while the link is black-holed; false means l was reset or
// the proxy closed.
func (p *proxy) waitUp(l *link) bool {
	for {
		p.mu.Lock()
		st, ch, closed := p.state, p.changed, p.closed
		p.mu.Unlock()
		if closed || l.isDead() || st == linkCut || st == linkAuthRefuse {
			return false
		}
		if st == linkUp {
			return true
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		l := &link{client: c}
		p.mu.Lock()
		if p.state == linkCut || p.closed {
			p.mu.Unlock()
			l.reset()
			continue
		}
		if p.state == linkAuthRefuse {
			p.wg.Add(1)
			p.mu.Unlock()
			go func() {
				defer p.wg.Done()
				refuseNATSAuth(c)
			}()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

func (p *proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
		l.reset()
	}()
	if !p.waitUp(l) {
		return
	}
	p.mu.Lock()
	upstream := p.upstream
	p.mu.Unlock()
	s, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		return
	}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		_ = s.Close()
		return
	}
	l.server = s
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	go p.pipe(l, s, l.client, done)
	go p.pipe(l, l.client, s, done)
	<-done
	l.reset() // one direction ended: end both, so neither side hangs half-open
	<-done
}

func (p *proxy) pipe(l *link, dst, src net.Conn, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitUp(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// refuseNATSAuth plays a NATS server that requires credentials and refuses
// the client's: INFO, then -ERR 'Authorization Violation' after CONNECT.
func refuseNATSAuth(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	info := `INFO {"server_id":"chaos-proxy","server_name":"chaos-proxy","version":"2.10.0","proto":1,` +
		`"headers":true,"max_payload":1048576,"auth_required":true}` + "\r\n"
	if _, err := c.Write([]byte(info)); err != nil {
		return
	}
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		if strings.HasPrefix(line, "CONNECT") {
			break
		}
	}
	_, _ = c.Write([]byte("-ERR 'Authorization Violation'\r\n"))
}
