package service

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// Certificate is a TLS certificate and key read from a pair of PEM files
// and read again when they change (checked at most once a second, at a
// handshake) or on SIGHUP (ReloadOnHangup), so that a renewed certificate
// (cert-manager rewriting a mounted Secret, certbot's deploy hook) is
// served without a restart. A pair that does not load keeps the one
// served: a half-written renewal never takes the listener down.
type Certificate struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp // of the pair served
	checked time.Time
	failed  [2]fileStamp // of the last pair that did not load, logged once
}

// fileStamp is what tells a changed file: a renewal written in place
// changes its modification time or size; a Secret's symlink swapped, its
// inode.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

// checkEvery bounds how often a handshake looks at the files.
const checkEvery = time.Second

// LoadCertificate reads the pair, failing with one line that names the
// file at fault.
func LoadCertificate(certFile, keyFile string, log *slog.Logger) (*Certificate, error) {
	c := &Certificate{certFile: certFile, keyFile: keyFile, log: log}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// Reload reads the pair again; on an error the pair served stays.
func (c *Certificate) Reload() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadLocked()
}

func (c *Certificate) loadLocked() error {
	c.checked = time.Now()
	stamp, err := c.stamps()
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		c.failed = stamp
		return fmt.Errorf("TLS certificate %s with key %s: %w", c.certFile, c.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		c.failed = stamp
		return fmt.Errorf("TLS certificate %s: %w", c.certFile, err)
	}
	cert.Leaf = leaf
	if c.cert != nil && c.log != nil {
		c.log.Info("TLS certificate reloaded", slog.String("file", c.certFile), slog.Time("not_after", leaf.NotAfter))
	}
	if time.Now().After(leaf.NotAfter) && c.log != nil {
		c.log.Warn("TLS certificate has expired", slog.String("file", c.certFile), slog.Time("not_after", leaf.NotAfter))
	}
	c.cert, c.stamp, c.failed = &cert, stamp, [2]fileStamp{}
	return nil
}

func (c *Certificate) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, name := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return out, fmt.Errorf("TLS certificate: %w", err)
		}
		out[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			out[i].ino = st.Ino
		}
	}
	return out, nil
}

// GetCertificate is the tls.Config hook: the pair served, read again
// first when the files changed since.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.checked) >= checkEvery {
		c.checked = time.Now()
		if stamp, err := c.stamps(); err == nil && stamp != c.stamp && stamp != c.failed {
			if err := c.loadLocked(); err != nil && c.log != nil {
				c.log.Error("TLS certificate changed but does not load; serving the previous one", slog.Any("error", err))
			}
		}
	}
	return c.cert, nil
}

// Config is a server configuration serving the certificate: TLS 1.2 at
// least.
func (c *Certificate) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.GetCertificate}
}

// ReloadOnHangup reads the pair again on each SIGHUP until ctx ends or
// the returned func is called.
func (c *Certificate) ReloadOnHangup(ctx context.Context) func() {
	ctx, cancel := context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := c.Reload(); err != nil && c.log != nil {
					c.log.Error("TLS certificate reload on SIGHUP failed; serving the previous one", slog.Any("error", err))
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
