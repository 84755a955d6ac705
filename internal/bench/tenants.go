package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/service"
)

// tenantsApp is the application_name of the tenants' pool, by which its
// sessions are counted in pg_stat_activity.
const tenantsApp = "outboxd-bench-tenants"

// queryCounter counts the statements a pool sends, alone or in batches.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}

func (c *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingSink counts the messages delivered to next.
type countingSink struct {
	next outbox.Sink
	n    atomic.Int64
}

func (s *countingSink) Publish(ctx context.Context, m *outbox.Message) error {
	if err := s.next.Publish(ctx, m); err != nil {
		return err
	}
	s.n.Add(1)
	return nil
}

// Close leaves next to its owner.
func (*countingSink) Close() error { return nil }

// tenants measures what many tables cost when one process relays them as
// the daemon relays a pattern's matches: one pool for all (set up by
// TenantPool), one LISTEN connection, a dispatcher per table. It reports
// the connections held and the statements sent while every table is idle,
// the CPU the relay and the server spend meanwhile, and the throughput
// when every tenant inserts its share of Messages at once.
func (b *Benchmarker) tenants(ctx context.Context) error {
	n := b.cfg.Tenants
	tables, drop, err := b.tenantTables(ctx, n)
	defer drop()
	if err != nil {
		return err
	}
	pcfg := b.pool.Config()
	if b.cfg.TenantPool != nil {
		b.cfg.TenantPool(pcfg)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = tenantsApp
	queries := &queryCounter{}
	pcfg.ConnConfig.Tracer = queries
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	sink := &countingSink{next: b.cfg.Sink}
	var logger *slog.Logger
	dispatchers := make([]*outbox.Dispatcher, 0, n)
	var listener *outbox.Listener
	var eff *outbox.Config
	defer func() {
		var wg sync.WaitGroup
		for _, d := range dispatchers {
			wg.Go(func() { _ = d.Stop() })
		}
		wg.Wait()
	}()
	for _, t := range tables {
		cfg, err := b.cfg.Dispatcher(t)
		if err != nil {
			return err
		}
		if listener == nil {
			logger = cfg.Logger
			listener = outbox.NewListener(pool, logger)
			eff = cfg.WithDefaults()
		}
		cfg.Listener = listener
		d, err := outbox.NewDispatcher(pool, sink, cfg)
		if err != nil {
			return err
		}
		if err := d.Start(ctx); err != nil {
			return err
		}
		dispatchers = append(dispatchers, d)
	}
	// Idle: once the polls have backed off as far as they go.
	settle := min(max(2*eff.IdlePollMax, 5*time.Second), 2*time.Minute)
	fmt.Fprintf(b.cfg.Stderr, "  %d dispatchers started; idle for %s, then measured for %s\n", n, settle, b.cfg.Duration)
	if !service.Sleep(ctx, settle) {
		return ctx.Err()
	}
	idle, err := b.measureIdle(ctx, queries)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.cfg.Stdout, "tenants %d idle: %d connections (pool max %d), %.1f queries/s, %.1f transactions/s on the database, relay CPU %.2f%% of a core, server CPU %s\n",
		n, idle.conns, pcfg.MaxConns, idle.qps, idle.xacts, idle.relayCPU, idle.serverCPU)

	burst, err := b.tenantBurst(ctx, tables, sink)
	if err != nil {
		return err
	}
	fmt.Fprintf(b.cfg.Stdout, "tenants %d burst: %d messages (%d per tenant) delivered in %s: %.0f msg/s, at most %d connections\n",
		n, burst.messages, burst.messages/n, burst.took.Round(time.Millisecond), float64(burst.messages)/burst.took.Seconds(), burst.conns)
	return nil
}

// tenantTables creates n tenant schemas, each with a migrated outbox, four
// at a time; drop removes them (unless Keep).
func (b *Benchmarker) tenantTables(ctx context.Context, n int) ([]string, func(), error) {
	base := fmt.Sprintf("outboxd_bench_%d_t", os.Getpid())
	schemas := make([]string, n)
	tables := make([]string, n)
	for i := range n {
		schemas[i] = fmt.Sprintf("%s%04d", base, i+1)
		tables[i] = schemas[i] + ".outbox"
	}
	var (
		mu      sync.Mutex
		created []string
		made    atomic.Int64
	)
	drop := func() {
		if b.cfg.Keep {
			fmt.Fprintf(b.cfg.Stdout, "kept the tenant schemas %s0001 to %s%04d\n", base, base, n)
			return
		}
		for _, s := range created {
			_, _ = b.pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i := range n {
		g.Go(func() error {
			if _, err := b.pool.Exec(gctx, "CREATE SCHEMA "+pgx.Identifier{schemas[i]}.Sanitize()); err != nil {
				return err
			}
			mu.Lock()
			created = append(created, schemas[i])
			mu.Unlock()
			a, err := outbox.NewAdmin(b.pool, tables[i])
			if err != nil {
				return err
			}
			if err := a.Migrate(gctx); err != nil {
				return err
			}
			if b.cfg.Shards > 0 {
				if err := a.EnableShards(gctx, b.cfg.Shards); err != nil {
					return err
				}
			}
			if b.cfg.Cursor {
				if err := a.EnableCursors(gctx); err != nil {
					return err
				}
			}
			if m := made.Add(1); m%100 == 0 {
				fmt.Fprintf(b.cfg.Stderr, "  migrated %d/%d tenant tables\n", m, n)
			}
			return nil
		})
	}
	return tables, drop, g.Wait()
}

// idleFigures are what an idle relay of many tables costs.
type idleFigures struct {
	conns     int     // sessions of the tenants' pool, at most
	qps       float64 // statements the pool sent per second
	xacts     float64 // transactions per second the database counted
	relayCPU  float64 // % of a core this process used
	serverCPU string  // the server's processes, or "not measured"
}

// measureIdle watches the idle relay for Duration.
func (b *Benchmarker) measureIdle(ctx context.Context, queries *queryCounter) (idleFigures, error) {
	var out idleFigures
	xacts := func() (int64, error) {
		var n int64
		err := b.pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_catalog.pg_stat_database
			WHERE datname = pg_catalog.current_database()`).Scan(&n)
		return n, err
	}
	// The statistics a backend keeps are flushed at most once a second.
	if _, err := b.pool.Exec(ctx, "SELECT pg_catalog.pg_stat_clear_snapshot()"); err != nil {
		return out, err
	}
	x0, err := xacts()
	if err != nil {
		return out, err
	}
	q0, cpu0, start := queries.n.Load(), processCPU(), time.Now()
	srv0, srvOK := serverCPU()
	srvOK = srvOK && localServer(b.pool)
	own := 0 // the statements of this watch, counted in xacts
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for time.Since(start) < b.cfg.Duration {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-tick.C:
		}
		c, err := b.sessions(ctx)
		if err != nil {
			return out, err
		}
		own++
		out.conns = max(out.conns, c)
	}
	took := time.Since(start)
	q1, cpu1 := queries.n.Load(), processCPU()
	if _, err := b.pool.Exec(ctx, "SELECT pg_catalog.pg_stat_clear_snapshot()"); err != nil {
		return out, err
	}
	x1, err := xacts()
	if err != nil {
		return out, err
	}
	own += 3
	out.qps = float64(q1-q0) / took.Seconds()
	out.xacts = float64(x1-x0-int64(own)) / took.Seconds()
	out.relayCPU = 100 * float64(cpu1-cpu0) / float64(took)
	out.serverCPU = "not measured (a remote server)"
	if srvOK {
		if d, ok := serverCPUSince(srv0); ok {
			out.serverCPU = fmt.Sprintf("%.2f%% of a core", 100*float64(d)/float64(took))
		}
	}
	return out, nil
}

// sessions counts the tenants' pool's sessions on the server.
func (b *Benchmarker) sessions(ctx context.Context) (int, error) {
	var n int
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1`, tenantsApp).Scan(&n)
	return n, err
}

// burstFigures are what the relay did when every tenant inserted at once.
type burstFigures struct {
	messages int
	took     time.Duration
	conns    int
}

// tenantBurst inserts Messages spread over the tables, one statement per
// tenant from four producers at once, and waits until the sink has them
// all.
func (b *Benchmarker) tenantBurst(ctx context.Context, tables []string, sink *countingSink) (burstFigures, error) {
	per := max(b.cfg.Messages/len(tables), 1)
	out := burstFigures{messages: per * len(tables)}
	before := sink.n.Load()
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for _, t := range tables {
		bt := &benchTable{name: t, schema: t[:len(t)-len(".outbox")]}
		g.Go(func() error {
			_, err := b.pool.Exec(gctx, bt.sql("fill.sql"), per, "pending", 100)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return out, err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for sink.n.Load()-before < int64(out.messages) {
		if time.Now().After(deadline) {
			return out, errors.New("the burst was not delivered within 10 minutes")
		}
		c, err := b.sessions(ctx)
		if err != nil {
			return out, err
		}
		out.conns = max(out.conns, c)
		if !service.Sleep(ctx, 50*time.Millisecond) {
			return out, ctx.Err()
		}
	}
	out.took = time.Since(start)
	return out, nil
}
