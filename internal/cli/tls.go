package cli

import (
	"context"
	"crypto/tls"
	"log/slog"

	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox/internal/service"
)

// tlsFlags are --tls-cert, --tls-key and --behind-tls-proxy: how the
// listeners a command opens (the console's, the metrics') are reached.
type tlsFlags struct {
	cert, key string
	proxy     bool
}

func (t *tlsFlags) register(fs *flag.FlagSet, listeners string) {
	fs.StringVar(&t.cert, "tls-cert", "", "serve "+listeners+" over HTTPS with this PEM certificate (chain); read again when it changes or on SIGHUP")
	fs.StringVar(&t.key, "tls-key", "", "the PEM private key of --tls-cert")
	fs.BoolVar(&t.proxy, "behind-tls-proxy", false, "a proxy in front of the console terminates TLS: allow credentials on a non-loopback --addr without --tls-cert; cookies are Secure, answers carry HSTS")
}

// check refuses half a pair and a pair with the proxy flag, before anything
// is opened.
func (t *tlsFlags) check() error {
	switch {
	case t.cert != "" && t.key == "":
		return usagef("--tls-cert needs --tls-key")
	case t.key != "" && t.cert == "":
		return usagef("--tls-key needs --tls-cert")
	case t.cert != "" && t.proxy:
		return usagef("--behind-tls-proxy and --tls-cert: choose one (the console serves TLS itself, or a proxy terminates it)")
	}
	return nil
}

// config loads the pair (the flags checked already) and reloads it on
// SIGHUP until the returned func is called: nil and a no-op without
// --tls-cert. A pair that does not load is a usage error naming the file.
func (t *tlsFlags) config(ctx context.Context, logger *slog.Logger) (*tls.Config, func(), error) {
	if t.cert == "" {
		return nil, func() {}, nil
	}
	c, err := t.load(logger)
	if err != nil {
		return nil, nil, err
	}
	return c.Config(), c.ReloadOnHangup(ctx), nil
}

func (t *tlsFlags) load(logger *slog.Logger) (*service.Certificate, error) {
	c, err := service.LoadCertificate(t.cert, t.key, logger)
	if err != nil {
		return nil, usagef("--tls-cert: %v", err)
	}
	return c, nil
}

// loads checks that the pair loads (config check).
func (t *tlsFlags) loads() error {
	if t.cert == "" {
		return nil
	}
	_, err := t.load(nil)
	return err
}
