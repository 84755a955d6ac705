package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/console"
)

// consoleAddrDefault is where `outboxd console` listens unless told.
const consoleAddrDefault = "127.0.0.1:8080"

// tablesFlag is a repeatable --table.
type tablesFlag []string

func (t *tablesFlag) String() string { return strings.Join(*t, ",") }

func (t *tablesFlag) Type() string { return "NAME" }

func (t *tablesFlag) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*t = append(*t, name)
		}
	}
	return nil
}

func runConsole(ctx context.Context, e *env, args []string) error {
	var (
		db      dbFlags
		tables  tablesFlag
		addr    string
		write   bool
		every   time.Duration
		timeout time.Duration
		hosts   []string
		tf      tlsFlags
		lf      logFlags
	)
	fs := newFlagSet(e, "console", "console [--dsn DSN] [--table NAME]... [--addr HOST:PORT] [--write]")
	fs.StringVar(&db.dsn, "dsn", "", "PostgreSQL connection string (default $OUTBOX_DSN, else the libpq environment)")
	fs.StringVar(&db.config, "config", "", "YAML config file (default $OUTBOXD_CONFIG); flags and OUTBOXD_* variables override it")
	fs.Var(&tables, "table", "outbox table, NAME or SCHEMA.NAME; repeat (or comma-separate) to show several (default outbox)")
	fs.StringVar(&addr, "addr", consoleAddrDefault, "listen address HOST:PORT")
	fs.BoolVar(&write, "write", false, "allow actions that change rows (dead retry/skip, replay); read-only without it")
	fs.StringSliceVar(&hosts, "allow-host", nil, "a name the console answers to besides its address, localhost and the loopback addresses (any other Host is refused 421); repeat or comma-separate")
	tf.register(fs, "the console")
	durVar(fs, &every, "sample-interval", console.SampleIntervalDefault, "how often the charts sample each table's gauges")
	durVar(fs, &timeout, "request-timeout", console.RequestTimeoutDefault, "bound on each request's statements; past it the statement is cancelled and the request answers 504")
	lf.register(fs)
	if err := parseLayered(e, fs, &db, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if err := tf.check(); err != nil {
		return err
	}
	if len(tables) == 0 {
		if err := db.oneTable(); err != nil {
			return err
		}
		tables = tablesFlag{outbox.TableDefault}
	}
	logger, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := outbox.NewAdmin(nil, t); err != nil {
			return usagef("--table: %v", err)
		}
	}
	db.appName = "outboxd-console"
	pool, err := db.connect(ctx, e, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	if every <= 0 {
		return usagef("--sample-interval must be positive")
	}
	if timeout <= 0 {
		return usagef("--request-timeout must be positive")
	}
	tc, stopTLS, err := tf.config(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTLS()
	return serveConsole(ctx, e, pool, consoleOpts{addr: addr, write: write, tables: tables, flag: "--addr", every: every, timeout: timeout, hosts: hosts, tls: tc, proxy: tf.proxy}, logger)
}

// consoleOpts are what `console` and `run --console-addr` share.
type consoleOpts struct {
	addr   string
	write  bool
	tables []string
	flag   string // the address flag's name, for errors
	every  time.Duration
	// timeout bounds each request (0: the console's default).
	timeout time.Duration
	// dynamic serves the tables added while it runs (pipelines), each
	// with the health health reports; tables is then empty.
	dynamic bool
	health  func(table string) string
	// hosts are the names it answers to besides its own (AllowedHostsFor).
	hosts []string
	// tls serves HTTPS (--tls-cert); proxy says a proxy terminates TLS in
	// front (--behind-tls-proxy). Credentials on a non-loopback address
	// need one of them.
	tls   *tls.Config
	proxy bool
}

// serveConsole checks the tables, then serves the console until ctx ends.
func serveConsole(ctx context.Context, e *env, pool *pgxpool.Pool, o consoleOpts, logger *slog.Logger) error {
	srv, ln, err := openConsole(ctx, e, pool, o, logger)
	if err != nil {
		return err
	}
	return srv.Serve(ctx, ln)
}

func openConsole(ctx context.Context, e *env, pool *pgxpool.Pool, o consoleOpts, logger *slog.Logger) (*console.Server, net.Listener, error) {
	for _, t := range o.tables {
		a, _ := outbox.NewAdmin(pool, t)
		if _, err := a.Gauges(ctx); err != nil {
			return nil, nil, fmt.Errorf("console: table %s: %w", t, err)
		}
	}
	creds := console.CredentialsFromEnv(e.getenv)
	console.Version = Version
	srv, err := console.New(pool, &console.Config{
		Tables: o.tables, Write: o.write, Credentials: creds, Insecure: isLoopback(o.addr), Logger: logger,
		SampleInterval: o.every, RequestTimeout: o.timeout, Dynamic: o.dynamic, Health: o.health,
		AllowedHosts: console.AllowedHostsFor(o.addr, o.hosts...), TLS: o.tls, BehindTLSProxy: o.proxy,
	})
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	if !isLoopback(o.addr) && o.tls == nil && !o.proxy {
		return nil, nil, usagef("console: %s %s is not a loopback address and its credentials would cross the network in clear text: "+
			"serve TLS (--tls-cert and --tls-key), or say that a proxy in front terminates it (--behind-tls-proxy)", o.flag, o.addr)
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return nil, nil, usagef("%s: cannot listen on %s: %v", o.flag, o.addr, err)
	}
	mode := "read-only"
	if o.write {
		mode = "write"
	}
	auth := "none (loopback, read-only)"
	switch {
	case creds.Token != "" && creds.User != "":
		auth = "bearer token or basic auth"
	case creds.Token != "":
		auth = "bearer token"
	case creds.User != "":
		auth = "basic auth"
	}
	scheme := "http://"
	if o.tls != nil {
		scheme = "https://"
	}
	logger.Info("console listening", slog.String("url", scheme+ln.Addr().String()+"/"),
		slog.Any("tables", o.tables), slog.String("mode", mode), slog.String("auth", auth))
	return srv, ln, nil
}

// isLoopback reports whether a listen address only accepts local
// connections.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// startConsole serves the console inside `run` until the returned func is
// called.
func (s *runSetup) startConsole(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger) (func(), error) {
	o := consoleOpts{addr: s.consoleAddr, write: s.consoleWrite, tables: []string{s.db.table}, flag: "--console-addr", hosts: s.consoleHosts, tls: s.tc, proxy: s.tls.proxy}
	srv, ln, err := openConsole(ctx, e, pool, o, logger)
	if err != nil {
		return nil, err
	}
	return serveInBackground(ctx, srv, ln, logger), nil
}

// serveInBackground serves srv on ln until the returned func is called.
func serveInBackground(ctx context.Context, srv *console.Server, ln net.Listener, logger *slog.Logger) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil {
			logger.Error("console stopped", slog.Any("error", err))
		}
	}()
	return func() { cancel(); <-done }
}
