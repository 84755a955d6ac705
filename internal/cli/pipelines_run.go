package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/console"
	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/metrics"
)

// fromPipeline is the source of a setting a pipeline gives itself.
const fromPipeline source = "pipeline"

// pipelineRetry is how long a pipeline that failed waits before it starts
// again; the others go on meanwhile.
const pipelineRetry = 30 * time.Second

// pipelineSetup is the setup of one pipeline: run's flags, variables and
// the file's top level, then the pipeline's own keys over them, and its
// table.
func (s *runSetup) pipelineSetup(e *env, args []string, p *pipelineSpec, table string) (*runSetup, error) {
	ps := newRunSetup(e, "run", "")
	if s.fs.Lookup(connectFlag) != nil {
		ps.fs.Bool(connectFlag, false, "") // config check's, parsed again here
	}
	if err := ps.parse(e, args); err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(p.values)) {
		if err := setFlag(ps.fs, k, p.values[k]); err != nil {
			return nil, usagef("--config %s: line %d: pipeline %q: %s: %v", s.db.config, p.lines[k], p.name, k, err)
		}
		ps.sources[k] = fromPipeline
	}
	if p.hasRoutes {
		ps.routes, ps.fileRoutes = nil, p.routes
	}
	// The daemon serves the metrics of all; the console is not served.
	ps.db.table, ps.pipelines, ps.metricsAddr, ps.consoleAddr, ps.tls = table, nil, "", "", tlsFlags{}
	ps.rf.idNamespace = pipelineNamespace(p, ps.rf.idNamespace, table)
	if _, err := outbox.NewAdmin(nil, table); err != nil {
		return nil, usagef("--config %s: line %d: pipeline %q: table: %v", s.db.config, p.lines["table"], p.name, err)
	}
	if _, err := ps.rf.config(table, nil); err != nil {
		return nil, fmt.Errorf("pipeline %q: %w", p.name, err)
	}
	if err := ps.checkSinks(); err != nil {
		return nil, fmt.Errorf("pipeline %q: %w", p.name, err)
	}
	if _, err := ps.db.poolConfig(e); err != nil {
		return nil, fmt.Errorf("pipeline %q: %w", p.name, err)
	}
	return ps, nil
}

// pipelineNamespace is the id namespace of a table relayed under p
// (--id-namespace): tables of several pipelines may feed one receiver,
// which dedupes on the id, and their ids overlap, so each pipeline's ids
// are qualified, by default with its name; a pattern's tables each with
// the namespace and their own SCHEMA.NAME (tenants.tenant_a.outbox:42).
func pipelineNamespace(p *pipelineSpec, ns, table string) string {
	if ns == "" {
		ns = p.name
	}
	if isPattern(p.table) {
		return ns + "." + table
	}
	return ns
}

// checkPipelines refuses what a file with pipelines cannot mean.
func (s *runSetup) checkPipelines() error {
	if s.sources["table"] != fromDefault {
		return usagef("--config %s has pipelines: name each table in its pipeline, not with --table", s.db.config)
	}
	return nil
}

// pipelineRun is one table relayed under a pipeline.
type pipelineRun struct {
	name  string // the pipeline's, and for a pattern's match its table: tenants/tenant_a.outbox
	spec  string // the pipeline's name
	print string // its fingerprint
	table string
	setup *runSetup
	// listener is its database's shared LISTEN connection.
	listener *outbox.Listener
	stop     context.CancelFunc
	done     chan struct{}
	err      error
	// problem is why its table is not relayed now (nil while it runs).
	problem atomic.Pointer[string]
}

// daemon runs every pipeline of the file: one pool per database, each
// table relayed by its own dispatcher, patterns matched again every
// --discover-interval (new tables start, vanished ones stop).
type daemon struct {
	e      *env
	s      *runSetup
	args   []string
	logger *slog.Logger
	specs  []pipelineSpec

	dsns   []string             // each pipeline's database
	prints map[string]string    // each pipeline's fingerprint, by name
	reg    *prometheus.Registry // with group, nil unless --metrics-addr
	group  *metrics.Group
	pools  map[string]*pgxpool.Pool // by DSN
	// listeners are each database's one LISTEN connection, by DSN.
	listeners map[string]*outbox.Listener
	mu        sync.Mutex
	runs      map[string]*pipelineRun // by table
	wg        sync.WaitGroup
	// console serves every table running (--console-addr); nil without.
	// shown are the runs whose table it shows, by table.
	console *console.Server
	shown   map[string]*pipelineRun
}

func runPipelines(ctx context.Context, e *env, s *runSetup, args []string) error {
	if err := s.checkPipelines(); err != nil {
		return err
	}
	logger, err := s.lf.logger(e.stderr)
	if err != nil {
		return err
	}
	d := &daemon{e: e, s: s, args: args, logger: logger, pools: map[string]*pgxpool.Pool{}, listeners: map[string]*outbox.Listener{}, runs: map[string]*pipelineRun{}}
	// Every pipeline's settings are checked before anything starts.
	l, err := d.load(s)
	if err != nil {
		return err
	}
	defer d.closePools()
	tc, stopTLS, err := s.listenTLS(ctx, logger)
	if err != nil {
		return err
	}
	defer stopTLS()
	if s.metricsAddr != "" {
		reg, group, stop, err := serveGroup(ctx, s.metricsAddr, tc, logger)
		if err != nil {
			return err
		}
		defer stop()
		d.reg, d.group = reg, group
	}
	if err := d.openPools(ctx, l); err != nil {
		return err
	}
	if s.consoleAddr != "" {
		o := consoleOpts{addr: s.consoleAddr, write: s.consoleWrite, flag: "--console-addr", dynamic: true, health: d.health, hosts: s.consoleHosts, tls: tc, proxy: s.tls.proxy}
		srv, ln, err := openConsole(ctx, d.e, nil, o, logger)
		if err != nil {
			return err
		}
		d.console, d.shown = srv, map[string]*pipelineRun{}
		stopConsole := serveInBackground(ctx, srv, ln, logger)
		defer stopConsole()
	}
	d.specs, d.dsns, d.prints = s.pipelines, l.dsns, l.prints
	d.discover(ctx)
	if !s.drain {
		// SIGHUP reloads the file. Discovery and reloads stop before the
		// pipelines are waited for: none starts once the wait began.
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		stop := d.rediscover(ctx, s.discoverEvery, hup)
		<-ctx.Done()
		stop()
	}
	return d.wait()
}

// fingerprint is what a pipeline's table is relayed with: every setting's
// effective value and the routes. A reload restarts a table whose
// pipeline's fingerprint changed.
func fingerprint(ps *runSetup) string {
	var b strings.Builder
	ps.fs.VisitAll(func(f *flag.Flag) { fmt.Fprintf(&b, "%s=%s\n", f.Name, f.Value.String()) })
	fmt.Fprintf(&b, "routes=%v\nsecrets=%v\n", ps.allRoutes(), []string(ps.secrets))
	return b.String()
}

// reload reads the file again (SIGHUP): pipelines added start, removed
// ones stop, changed ones (their settings or the top level's) restart; a
// file that does not validate is refused, logged, and the pipelines
// running go on. Settings of the process (metrics-addr, log-*) take a
// restart. Called by the discovery loop only, which owns the specs.
func (d *daemon) reload(ctx context.Context) {
	refuse := func(err error) {
		d.logger.Error("reload refused: the pipelines running go on", slog.Any("error", err))
	}
	ns := newRunSetup(d.e, "run", "")
	if err := ns.parse(d.e, d.args); err != nil {
		refuse(err)
		return
	}
	if len(ns.pipelines) == 0 {
		refuse(errors.New("the file has no pipelines any more (a restart turns the daemon into a single-table relay)"))
		return
	}
	if err := ns.checkPipelines(); err != nil {
		refuse(err)
		return
	}
	l, err := d.load(ns)
	if err != nil {
		refuse(err)
		return
	}
	if err := d.openPools(ctx, l); err != nil {
		refuse(err)
		return
	}
	// Stop what was removed or changed, and wait, so that a changed
	// pipeline's table is not relayed twice by this process.
	d.mu.Lock()
	var stopping []*pipelineRun
	for key, r := range d.runs {
		if fp, ok := l.prints[r.spec]; !ok || fp != r.print {
			d.logger.Info("stopping a pipeline: removed from the file or changed", slog.String("pipeline", r.name))
			d.drop(key, r)
			stopping = append(stopping, r)
		}
	}
	d.specs, d.dsns, d.prints, d.s = ns.pipelines, l.dsns, l.prints, ns
	d.mu.Unlock()
	for _, r := range stopping {
		<-r.done
	}
	d.logger.Info("reloaded the config file", slog.Int("pipelines", len(ns.pipelines)))
	d.discover(ctx)
}

// loaded is what load reads of a file's pipelines: each one's setup (on a
// placeholder table) and database, and each one's fingerprint by name.
type loaded struct {
	names  []string
	setups []*runSetup
	dsns   []string
	prints map[string]string
}

// load checks every pipeline of s and reads what starting them needs.
func (d *daemon) load(s *runSetup) (loaded, error) {
	n := len(s.pipelines)
	l := loaded{names: make([]string, n), setups: make([]*runSetup, n), dsns: make([]string, n), prints: map[string]string{}}
	for i := range s.pipelines {
		ps, err := s.pipelineSetup(d.e, d.args, &s.pipelines[i], outbox.TableDefault)
		if err != nil {
			return l, err
		}
		l.names[i], l.setups[i], l.dsns[i] = s.pipelines[i].name, ps, ps.db.resolveDSN(d.e)
		l.prints[s.pipelines[i].name] = fingerprint(ps)
	}
	return l, nil
}

// Each database's pool (see daemonPool): 8 connections and 2 more per
// pipeline naming the database, at most maxDaemonConns; one of them is
// the LISTEN connection.
const maxDaemonConns = 16

// daemonPool sets up the pool of a database that pipelines pipelines relay
// from. Its connections are opened as statements need them, and closed
// after a minute unused: idle tables back off their polls, so a thousand
// of them keep a few connections open, not what a burst opened. A DSN
// that sets pool_max_conns keeps it.
func daemonPool(cfg *pgxpool.Config, pipelines int, dsn string) {
	if !strings.Contains(dsn, "pool_max_conns") {
		cfg.MaxConns = int32(min(8+2*pipelines, maxDaemonConns))
	}
	if !strings.Contains(dsn, "pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = time.Minute
	}
	if !strings.Contains(dsn, "pool_health_check_period") {
		cfg.HealthCheckPeriod = 15 * time.Second
	}
}

// openPools opens the pool of each database l names that has none yet
// (daemonPool): the tables relayed there share it for their statements,
// and one LISTEN connection for their wake-ups.
func (d *daemon) openPools(ctx context.Context, l loaded) error {
	perDB := map[string]int{}
	for _, dsn := range l.dsns {
		perDB[dsn]++
	}
	for i, dsn := range l.dsns {
		if d.pools[dsn] != nil {
			continue
		}
		pool, err := l.setups[i].db.connectWith(ctx, d.e, func(cfg *pgxpool.Config) { daemonPool(cfg, perDB[dsn], dsn) })
		if err != nil {
			return fmt.Errorf("pipeline %q: %w", l.names[i], err)
		}
		d.pools[dsn] = pool
		d.listeners[dsn] = outbox.NewListener(pool, d.logger)
	}
	return nil
}

func (d *daemon) closePools() {
	for _, p := range d.pools {
		p.Close()
	}
}

// discover matches every pipeline's table and starts the tables not yet
// running; with running set to the tables matched, it stops those no
// pattern matches any more. A table two pipelines name runs under the
// first.
func (d *daemon) discover(ctx context.Context) {
	matched := map[string]bool{}
	for i := range d.specs {
		p := &d.specs[i]
		pool := d.pools[d.dsns[i]]
		tables := []string{p.table}
		if isPattern(p.table) {
			var err error
			tables, err = outbox.MatchTables(ctx, pool, p.table)
			if err != nil {
				d.logger.Error("matching a pipeline's tables failed; trying again later", slog.String("pipeline", p.name), slog.Any("error", poolerHint(err)))
				for key := range d.runningOf(p.name) {
					matched[key] = true // kept until a match says otherwise
				}
				continue
			}
			if len(tables) == 0 {
				d.logger.Warn("a pipeline's pattern matches no table yet", slog.String("pipeline", p.name), slog.String("table", p.table))
			}
		}
		for _, t := range tables {
			key := d.dsns[i] + "\x00" + t
			if matched[key] {
				continue
			}
			matched[key] = true
			name := p.name
			if isPattern(p.table) {
				name = p.name + "/" + t
			}
			d.start(ctx, p, name, t, key, pool, d.listeners[d.dsns[i]])
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, r := range d.runs {
		if !matched[key] {
			d.logger.Info("stopping a pipeline: its pattern no longer matches its table", slog.String("pipeline", r.name))
			d.drop(key, r)
		}
	}
}

// drop stops r and forgets it (under d.mu): its table leaves the console.
func (d *daemon) drop(key string, r *pipelineRun) {
	r.stop()
	delete(d.runs, key)
	if d.shown[r.table] == r {
		d.console.RemoveTable(r.table)
		delete(d.shown, r.table)
	}
}

// health is the console's word on a table: why its pipeline does not
// relay it now, or "".
func (d *daemon) health(table string) string {
	d.mu.Lock()
	r := d.shown[table]
	d.mu.Unlock()
	if r != nil {
		if p := r.problem.Load(); p != nil {
			return *p
		}
	}
	return ""
}

// runningOf returns the running tables of the pipeline named, by key.
func (d *daemon) runningOf(pipeline string) map[string]*pipelineRun {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]*pipelineRun{}
	for k, r := range d.runs {
		if r.spec == pipeline {
			out[k] = r
		}
	}
	return out
}

// start runs one table under p unless it runs already.
func (d *daemon) start(ctx context.Context, p *pipelineSpec, name, table, key string, pool *pgxpool.Pool, listener *outbox.Listener) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.runs[key] != nil {
		return
	}
	ps, err := d.s.pipelineSetup(d.e, d.args, p, table)
	if err != nil {
		d.logger.Error("a pipeline's table cannot be relayed", slog.String("pipeline", name), slog.Any("error", err))
		return
	}
	if d.group != nil {
		ps.group = &pipelineMetrics{reg: d.reg, group: d.group, pipeline: p.name, name: name}
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &pipelineRun{name: name, spec: p.name, print: d.prints[p.name], table: table, setup: ps, listener: listener, stop: cancel, done: make(chan struct{})}
	d.runs[key] = r
	logger := d.logger.With(slog.String("pipeline", name))
	logger.Info("starting a pipeline", slog.String("table", table))
	if d.console != nil {
		if err := d.console.AddTable(table, pool); err != nil {
			logger.Warn("the console does not show this table: another pipeline's has its name", slog.String("table", table))
		} else {
			d.shown[table] = r
		}
	}
	d.wg.Go(func() {
		defer close(r.done)
		r.err = r.run(rctx, d.e, pool, logger, d.s.drain)
	})
}

// run relays the table until ctx ends (or, draining, nothing is left). A
// failure is logged and the table started again after pipelineRetry;
// draining, it is returned.
func (r *pipelineRun) run(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger, drain bool) error {
	for {
		err := r.once(ctx, e, pool, logger)
		if err == nil || ctx.Err() != nil || drain {
			if err != nil && drain {
				logger.Error("pipeline failed", slog.Any("error", err))
			}
			return err
		}
		logger.Error("pipeline failed; the others go on, this one starts again", slog.Any("error", err), slog.Duration("retry_in", pipelineRetry))
		problem := fmt.Sprintf("failed, starting again in %s: %v", pipelineRetry, err)
		r.problem.Store(&problem)
		if !service.Sleep(ctx, pipelineRetry) {
			return nil
		}
		r.problem.Store(nil)
	}
}

func (r *pipelineRun) once(ctx context.Context, e *env, pool *pgxpool.Pool, logger *slog.Logger) error {
	s := r.setup
	cfg, err := s.rf.config(s.db.table, logger)
	if err != nil {
		return err
	}
	cfg.Listener = r.listener
	sink, router, err := s.openSinks(e, logger, nil)
	if err != nil {
		return err
	}
	defer sink.Close()
	if cfg.Flow, err = s.flow(router); err != nil {
		return err
	}
	if err := s.checkStart(ctx, pool, router, logger); err != nil {
		return err
	}
	return s.relay(ctx, e, pool, sink, cfg, logger)
}

// rediscover matches the patterns again every interval, and reloads the
// file on hup, until stopped.
func (d *daemon) rediscover(ctx context.Context, every time.Duration, hup <-chan os.Signal) func() {
	var r service.Runner
	_ = r.Start(ctx, func(ctx context.Context) error {
		var tick <-chan time.Time // nil: never, without an interval
		if every > 0 {
			t := time.NewTicker(every)
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick:
				if d.hasPatterns() {
					d.discover(ctx)
				}
			case <-hup:
				d.reload(ctx)
			}
		}
	})
	return func() { _ = r.Stop() }
}

// hasPatterns reports whether a pipeline's table is a pattern.
func (d *daemon) hasPatterns() bool {
	return slices.ContainsFunc(d.specs, func(p pipelineSpec) bool { return isPattern(p.table) })
}

// wait waits for every pipeline to end and returns what failed: an error
// naming each pipeline that failed, else an ordered drain's "blocked"
// (exit 3) if one ended so.
func (d *daemon) wait() error {
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	var failed []string
	var blocked error
	for _, k := range slices.Sorted(maps.Keys(d.runs)) {
		r := d.runs[k]
		var ee *exitError
		switch {
		case r.err == nil:
		case errors.As(r.err, &ee) && ee.code == ExitBlocked:
			blocked = fmt.Errorf("pipeline %q: %w", r.name, r.err)
		default:
			failed = append(failed, fmt.Sprintf("%s: %v", r.name, r.err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d %s failed: %s", len(failed), plural(int64(len(failed)), "pipeline", "pipelines"), strings.Join(failed, "; "))
	}
	return blocked
}

// checkPipelineConfig is config check of a file with pipelines: one block
// per pipeline (its table, every setting and where it came from, its
// routes), and with --connect the checks of each table a pipeline names
// (a pattern's matches listed first) and of its sinks.
func checkPipelineConfig(ctx context.Context, e *env, s *runSetup, args []string, connect bool) error {
	if err := s.checkPipelines(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "config file: %s\n", s.db.config)
	fmt.Fprintln(e.stdout, "\nprocess:")
	if err := s.printSettings(e, nil, func(name string) bool { return processKeys[name] }); err != nil {
		return err
	}
	setups := make([]*runSetup, len(s.pipelines))
	for i := range s.pipelines {
		p := &s.pipelines[i]
		ps, err := s.pipelineSetup(e, args, p, outbox.TableDefault)
		if err != nil {
			return err
		}
		setups[i] = ps
		cfg, _ := ps.rf.config(outbox.TableDefault, nil)
		what := "table " + p.table
		if isPattern(p.table) {
			what += fmt.Sprintf(" (a pattern: matched at the start and every %s)", s.discoverEvery)
		}
		fmt.Fprintf(e.stdout, "\npipeline %s: %s\n", p.name, what)
		if err := ps.printSettings(e, cfg.WithDefaults(), func(name string) bool { return !processKeys[name] && name != "table" }); err != nil {
			return err
		}
		ps.printRoutes(e.stdout)
	}
	fmt.Fprintf(e.stdout, "\nconfiguration is valid (%d %s)\n", len(s.pipelines), plural(int64(len(s.pipelines)), "pipeline", "pipelines"))
	if !connect {
		return nil
	}
	var failed []string
	for i := range s.pipelines {
		p := &s.pipelines[i]
		fmt.Fprintf(e.stdout, "\npipeline %s:\n", p.name)
		tables := []string{p.table}
		if isPattern(p.table) {
			pool, err := setups[i].db.connect(ctx, e, 2)
			if err != nil {
				fmt.Fprintf(e.stdout, "  FAIL  database: reachable: %v\n", err)
				failed = append(failed, p.name)
				continue
			}
			tables, err = outbox.MatchTables(ctx, pool, p.table)
			pool.Close()
			if err != nil {
				fmt.Fprintf(e.stdout, "  FAIL  table %s: matched: %v\n", p.table, poolerHint(err))
				failed = append(failed, p.name)
				continue
			}
			fmt.Fprintf(e.stdout, "  %s matches %d %s: %s\n", p.table, len(tables), plural(int64(len(tables)), "table", "tables"), strings.Join(tables, ", "))
		}
		for _, t := range tables {
			ts, err := s.pipelineSetup(e, args, p, t)
			if err != nil {
				return err
			}
			if err := runConnectChecks(ctx, e, ts); err != nil {
				failed = append(failed, p.name+" ("+t+")")
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("config check --connect: failed for %s", strings.Join(failed, ", "))
	}
	return nil
}
