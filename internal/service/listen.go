package service

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// HTTPServer is a server for h with the limits every listener of the
// program keeps, so that a client on the network cannot hold its
// connections: a request's headers within 10 s and the whole of it within
// 30 s, an answer written within a minute, a keep-alive connection idle
// for a minute closed, headers of at most 64 KiB.
func HTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// Serve serves srv on ln, over TLS when srv.TLSConfig is set (its
// certificate from the config, e.g. [Certificate.Config]).
func Serve(srv *http.Server, ln net.Listener) error {
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// LimitConns caps the connections ln holds open at once to a 1/share of
// the process's open-file limit (at least 4, at most most): past it,
// connections wait in the kernel's backlog instead of taking the file
// descriptors every other listener, the database pool and the sinks need.
// A flood of connections to the console then leaves /healthz answering.
func LimitConns(ln net.Listener, share, most int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, connCap(share, most)), done: make(chan struct{})}
}

// limitListener accepts a connection only while fewer than cap(sem) it
// accepted are open.
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back once, when closed.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func connCap(share, most int) int {
	n := most
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < uint64(most*share) {
		n = int(lim.Cur) / share
	}
	return max(n, 4)
}
