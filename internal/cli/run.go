package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	flag "github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/metrics"
	"github.com/outboxd/outbox/sink/route"
	"github.com/outboxd/outbox/sink/sinkutil"
	"github.com/outboxd/outbox/tracing"
)

// runSetup holds the options run and config check share, and where each
// effective value came from.
type runSetup struct {
	metricsAddr  string
	consoleAddr  string
	consoleWrite bool
	consoleHosts []string
	tls          tlsFlags
	limits       sinkLimits
	// tc serves the console and the metrics over TLS (--tls-cert): nil
	// without, and until relay loads it.
	tc         *tls.Config
	secrets    secretFlags
	retention  time.Duration
	db         dbFlags
	rf         runFlags
	lf         logFlags
	drain      bool
	routes     routeFlags
	fileRoutes []routeSpec
	fs         *flag.FlagSet
	sources    map[string]source
	// pipelines are the file's (none: the one table of --table), and
	// discoverEvery how often their patterns are matched again.
	pipelines     []pipelineSpec
	discoverEvery time.Duration
	// group, for a pipeline's table, is where its metrics go (the daemon
	// serves them all): nil unless the daemon serves metrics.
	group *pipelineMetrics
}

func newRunSetup(e *env, name, synopsis string) *runSetup {
	s := &runSetup{fs: newFlagSet(e, name, synopsis)}
	s.db.register(s.fs)
	s.rf.register(s.fs, "stdout:")
	s.lf.register(s.fs)
	s.fs.BoolVar(&s.drain, "drain", false, "exit 0 once nothing is pending or processing; exit 3 when, delivering in order, messages wait behind a dead message of their aggregate")
	s.fs.Var(&s.secrets, "webhook-secret", "sign webhooks (Standard Webhooks) with this whsec_ secret; repeat or comma-separate to rotate keys, newest first (prefer $OUTBOXD_WEBHOOK_SECRET)")
	s.fs.StringVar(&s.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on this address (e.g. :9090)")
	s.fs.StringVar(&s.consoleAddr, "console-addr", "", "serve the web console and its API on this address (e.g. 127.0.0.1:8080)")
	s.fs.BoolVar(&s.consoleWrite, "console-write", false, "allow the console's actions that change rows (dead retry/skip, replay)")
	s.fs.StringSliceVar(&s.consoleHosts, "console-allow-host", nil, "a name the console answers to besides its address, localhost and the loopback addresses (any other Host is refused 421); repeat or comma-separate")
	s.tls.register(s.fs, "the console and the metrics listener")
	s.fs.Var(&s.limits.rate, "sink-rate", "send the default sink (the table, without routes) at most this many messages: N a second, N/s, N/m or N/h, over all dispatchers; 0 = no limit")
	s.fs.IntVar(&s.limits.burst, "sink-burst", 0, "with --sink-rate: how many may go at once after a quiet spell (0 = 1, evenly paced)")
	s.fs.IntVar(&s.limits.concurrency, "sink-concurrency", 0, "at most this many publishes in flight to the default sink at once, over all dispatchers (0 = no limit)")
	durVar(s.fs, &s.retention, "retention", 0, "purge done rows older than this in the background (e.g. 7d); 0 = keep them")
	durVar(s.fs, &s.discoverEvery, "discover-interval", 30*time.Second, "with pipelines in the config file: match the tables of their patterns again this often (0 = only at the start)")
	quietVar(s.fs, &s.routes, "route", "route FILTER[,FILTER]=URL, e.g. event_type=Order*=http://orders/hook (repeatable; replaces the file's routes)")
	return s
}

// parse reads flags, then fills the rest from the environment and the file.
func (s *runSetup) parse(e *env, args []string) error {
	markLayered(s.fs)
	if err := parseFlags(e, s.fs, args); err != nil {
		return err
	}
	if err := noArgs(s.fs); err != nil {
		return err
	}
	if err := s.tls.check(); err != nil {
		return err
	}
	if s.db.config == "" {
		s.db.config = e.getenv("OUTBOXD_CONFIG")
	}
	var file *configFile
	if s.db.config != "" {
		known := func(k string) bool { return k != "config" && k != "route" && k != connectFlag && s.fs.Lookup(k) != nil }
		f, err := loadConfigFile(s.db.config, known)
		if err != nil {
			return err
		}
		file = f
		s.fileRoutes = f.routes
		s.pipelines = f.pipelines
	}
	sources, err := applyLayers(s.fs, file, e.getenv)
	if err != nil {
		return err
	}
	s.sources = sources
	if len(s.routes) > 0 {
		s.fileRoutes = nil
	}
	if _, err := outbox.NewAdmin(nil, s.db.table); err != nil {
		return usagef("--table: %v", err)
	}
	_, err = s.db.poolConfig(e)
	return err
}

// allRoutes returns the effective routes: --route flags, else the file's.
func (s *runSetup) allRoutes() []routeSpec {
	if len(s.routes) > 0 {
		return s.routes
	}
	return s.fileRoutes
}

// hasDefaultSink reports whether --sink was given (by flag, env or file) or
// no routes exist: with routes and no explicit --sink there is no default.
func (s *runSetup) hasDefaultSink() bool {
	return len(s.allRoutes()) == 0 || s.sources["sink"] != fromDefault
}

// openSinks builds the sink the configuration describes: the --sink URL
// alone, or a router over the routes with --sink as its default.
func (s *runSetup) openSinks(e *env, logger *slog.Logger, tracer trace.TracerProvider) (outbox.Sink, *route.Router, error) {
	se := &sinkEnv{stdout: e.stdout, secrets: s.secrets, logger: logger, tracer: tracer}
	routes := s.allRoutes()
	if len(routes) == 0 {
		sink, err := openSink(s.rf.sink, se)
		return sink, nil, err
	}
	opened := map[string]outbox.Sink{}
	var all []outbox.Sink
	closeAll := func() {
		for _, sk := range all {
			_ = sk.Close()
		}
	}
	get := func(u string) (outbox.Sink, error) {
		if sk, ok := opened[u]; ok {
			return sk, nil
		}
		sk, err := openSink(u, se)
		if err != nil {
			return nil, err
		}
		opened[u] = sk
		all = append(all, sk)
		return sk, nil
	}
	rs := make([]route.Route, 0, len(routes))
	for _, r := range routes {
		sk, err := get(r.Sink)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		rs = append(rs, route.Route{Name: sinkutil.RedactURL(r.Sink), AggregateTypes: r.AggregateTypes, EventTypes: r.EventTypes, Sink: sk, Limits: r.limits()})
	}
	var def outbox.Sink
	if s.hasDefaultSink() {
		sk, err := get(s.rf.sink)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		def = sk
	}
	router, err := route.New(rs, def)
	if err != nil {
		closeAll()
		return nil, nil, usagef("routes: %v", err)
	}
	return router, router, nil
}

func runRun(ctx context.Context, e *env, args []string) error {
	s := newRunSetup(e, "run", "run [--sink URL] [--route FILTER=URL]... [--config FILE] [--workers N] [--batch N] [--lease DUR] [--ordered] [--drain] ...")
	if err := s.parse(e, args); err != nil {
		return err
	}
	if len(s.pipelines) > 0 {
		return runPipelines(ctx, e, s, args)
	}
	logger, err := s.lf.logger(e.stderr)
	if err != nil {
		return err
	}
	cfg, err := s.rf.config(s.db.table, logger)
	if err != nil {
		return err
	}
	tracer, stopTracing, err := startTracing(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	sink, router, err := s.openSinks(e, logger, tracer)
	if err != nil {
		return err
	}
	defer sink.Close()
	if cfg.Flow, err = s.flow(router); err != nil {
		return err
	}
	pool, err := s.db.connect(ctx, e, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := s.checkStart(ctx, pool, router, logger); err != nil {
		return err
	}
	return s.relay(ctx, e, pool, sink, cfg, logger)
}

// listenTLS loads --tls-cert for the listeners run opens; with no
// listener to serve it is refused, not ignored.
func (s *runSetup) listenTLS(ctx context.Context, logger *slog.Logger) (*tls.Config, func(), error) {
	if err := s.tlsListeners(); err != nil {
		return nil, nil, err
	}
	return s.tls.config(ctx, logger)
}

// tlsListeners refuses --tls-cert or --behind-tls-proxy with no listener.
func (s *runSetup) tlsListeners() error {
	if (s.tls.cert != "" || s.tls.proxy) && s.metricsAddr == "" && s.consoleAddr == "" {
		which := "--tls-cert"
		if s.tls.proxy {
			which = "--behind-tls-proxy"
		}
		return usagef("%s: no listener to serve (set --metrics-addr or --console-addr)", which)
	}
	return nil
}

// startTracing configures tracing from the standard OTEL_* variables only:
// with none set, tracer is nil, sinks are not wrapped and tracing costs
// nothing. stop flushes the traces.
func startTracing(ctx context.Context, logger *slog.Logger) (tracer trace.TracerProvider, stop func(), err error) {
	tp, shutdown, on, err := tracing.Setup(ctx)
	if err != nil {
		return nil, nil, usagef("tracing: %v", err)
	}
	stop = func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			logger.Warn("flushing traces", slog.Any("error", err))
		}
	}
	if on {
		tracer = tp
		routeOTelLogs(logger)
		logger.Info("tracing on (OTLP over HTTP, from OTEL_* variables)")
	}
	return tracer, stop, nil
}

// checkStart refuses to start what could only fail: a negative
// --retention, a role lacking a privilege, waiting messages no route takes.
func (s *runSetup) checkStart(ctx context.Context, pool *pgxpool.Pool, router *route.Router, logger *slog.Logger) error {
	if s.retention < 0 {
		return usagef("--retention must not be negative")
	}
	if err := s.checkAccess(ctx, pool); err != nil {
		return err
	}
	if router != nil {
		if err := checkRoutes(ctx, pool, s.db.table, router); err != nil {
			return err
		}
		logger.Info("routes", slog.String("table", router.String()))
	}
	return nil
}

// relay runs the dispatcher, with the metrics server, the console,
// progress logging and retention the flags ask for, until ctx ends (or,
// with --drain, nothing is left), then logs a summary.
func (s *runSetup) relay(ctx context.Context, e *env, pool *pgxpool.Pool, sink outbox.Sink, cfg *outbox.Config, logger *slog.Logger) error {
	if s.group == nil {
		tc, stopTLS, err := s.listenTLS(ctx, logger)
		if err != nil {
			return err
		}
		defer stopTLS()
		s.tc = tc
	}
	var m *metrics.Metrics
	if s.metricsAddr != "" || s.group != nil {
		var stopMetrics func()
		var err error
		m, stopMetrics, err = s.startMetrics(ctx, pool, cfg, logger)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	d, err := outbox.NewDispatcher(pool, sink, cfg)
	if err != nil {
		return err
	}
	if m != nil {
		m.WatchDestinations(d.Destinations)
		m.WatchPauses(d.Paused)
	}
	if s.consoleAddr != "" {
		stopConsole, err := s.startConsole(ctx, e, pool, logger)
		if err != nil {
			return err
		}
		defer stopConsole()
	}
	if m != nil {
		m.SetUp(true)
		defer m.SetUp(false)
	}
	defer logProgress(ctx, logger, d, 10*time.Second)()
	if s.retention > 0 {
		defer runRetention(ctx, pool, s.db.table, s.retention, logger)()
	}
	if s.drain {
		err = d.Drain(ctx)
	} else {
		err = d.Run(ctx)
	}
	if err != nil {
		return poolerHint(err)
	}
	st := d.Stats()
	logger.Info("summary", slog.Int64("done", st.Done), slog.Int64("retried", st.Retried),
		slog.Int64("deferred", st.Deferred), slog.Int64("dead", st.Dead), slog.Int64("lease_lost", st.LeaseLost))
	if s.drain && d.Config().Ordered && ctx.Err() == nil {
		return drainedBlocked(ctx, pool, s.db.table)
	}
	return nil
}

// drainedBlocked is what an ordered drain ends with: nil when nothing is
// left, else an error naming what waits behind a dead message (exit 3), so
// a script running --drain does not take "drained" for "delivered".
func drainedBlocked(ctx context.Context, pool *pgxpool.Pool, table string) error {
	admin, err := outbox.NewAdmin(pool, table)
	if err != nil {
		return err
	}
	b, err := admin.Blocked(ctx, 1)
	if err != nil || b.Messages == 0 {
		return err
	}
	first := b.List[0]
	return &exitError{code: ExitBlocked, msg: fmt.Sprintf(
		"drained, but %d %s of %d %s wait behind a dead message (first: aggregate %q behind id %d); retry or skip it (outboxd dead retry %d, outboxd dead skip %d)",
		b.Messages, plural(b.Messages, "message", "messages"), b.Aggregates, plural(b.Aggregates, "aggregate", "aggregates"),
		first.AggregateID, first.DeadID, first.DeadID, first.DeadID)}
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// checkAccess refuses to start when the role lacks a privilege the run
// needs (DELETE too with --retention), naming it and the GRANT that supplies
// it: without it every claim or purge would fail, and be retried, forever.
func (s *runSetup) checkAccess(ctx context.Context, pool *pgxpool.Pool) error {
	admin, err := outbox.NewAdmin(pool, s.db.table)
	if err != nil {
		return err
	}
	acc, err := admin.CheckAccess(ctx, &outbox.AccessOpts{NoNotify: s.rf.noNotify, Retention: s.retention > 0, NoHistory: s.rf.attemptHistory == 0})
	if err != nil {
		return poolerHint(err)
	}
	var pe *outbox.PrivilegeError
	if errors.As(acc.Err(), &pe) {
		return fmt.Errorf("%w (as the table's owner: %s)", pe, strings.Join(pe.Grants(), " "))
	}
	return nil
}

// checkRoutes refuses to start when messages already waiting would match no
// route: a routing gap is a configuration error to report now, not a dead
// message at 3 a.m. (Messages inserted later that match nothing go dead
// with "no route matches" in last_error.)
func checkRoutes(ctx context.Context, pool *pgxpool.Pool, table string, router *route.Router) error {
	if router.HasDefault() {
		return nil
	}
	admin, err := outbox.NewAdmin(pool, table)
	if err != nil {
		return err
	}
	types, err := admin.UndeliveredTypes(ctx)
	if err != nil {
		return poolerHint(err)
	}
	if missing := router.Unrouted(types); len(missing) > 0 {
		parts := make([]string, 0, len(missing))
		for _, m := range missing {
			parts = append(parts, m[0]+"/"+m[1])
		}
		return usagef("no route (and no default --sink) for waiting messages of aggregate_type/event_type: %s", strings.Join(parts, ", "))
	}
	return nil
}

// logProgress logs the dispatcher's counters every interval while they move.
func logProgress(ctx context.Context, logger *slog.Logger, d *outbox.Dispatcher, every time.Duration) func() {
	var r service.Runner
	// A fresh Runner always starts.
	_ = r.Start(ctx, func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		var last outbox.Stats
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			st := d.Stats()
			if st == last {
				continue
			}
			rate := float64(st.Done-last.Done) / every.Seconds()
			logger.Info("progress", slog.Int64("done", st.Done), slog.Int64("retried", st.Retried),
				slog.Int64("dead", st.Dead), slog.Int64("lease_lost", st.LeaseLost), slog.Float64("done_per_second", rate))
			last = st
		}
	})
	return func() { _ = r.Stop() }
}

// runRetention purges done rows older than keep in the background, checking
// every tenth of the retention period (at least a minute apart, at most an
// hour).
func runRetention(ctx context.Context, pool *pgxpool.Pool, table string, keep time.Duration, logger *slog.Logger) func() {
	admin, err := outbox.NewAdmin(pool, table)
	if err != nil {
		return func() {}
	}
	r := admin.Retention(keep, min(max(keep/10, time.Minute), time.Hour), logger)
	if err := r.Start(ctx); err != nil {
		return func() {}
	}
	return func() { _ = r.Stop() }
}

// secretFlags collects webhook secrets from repeated or comma-separated
// values. Its String never shows them.
type secretFlags []string

func (s *secretFlags) String() string {
	if s == nil || len(*s) == 0 {
		return ""
	}
	return fmt.Sprintf("%d secret(s)", len(*s))
}

func (s *secretFlags) Type() string { return "SECRET" }

func (s *secretFlags) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}
