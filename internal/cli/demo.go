package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/pgcluster"
)

// runDemo runs the whole pipeline for a newcomer: a database (the one named
// by --dsn or the environment, else a throwaway cluster), concurrent
// producers writing orders in their own transactions, several dispatchers
// delivering them in order per order id, a few injected transient failures
// to show retries, progress, and a summary.
func runDemo(ctx context.Context, e *env, args []string) error {
	var o demoOpts
	c := newDBCommand(e, "demo", "demo [--orders N] [--producers N] [--dispatchers N] [--sink URL] [--dsn DSN]", &o.lf, &o)
	if err := c.parse(e, args); err != nil {
		return err
	}
	if o.orders < 1 || o.producers < 1 || o.procs < 1 || o.workers < 1 {
		return usagef("--orders, --producers, --dispatchers and --workers must be positive")
	}
	if o.failRate < 0 || o.failRate >= 1 {
		return usagef("--fail-rate must be in [0, 1)")
	}
	o.lf.level = cmpString(o.lf.level, "warn")
	logger, err := o.lf.logger(e.stderr)
	if err != nil {
		return err
	}
	sink, err := openSink(o.sinkURL, &sinkEnv{stdout: e.stdout, logger: logger})
	if err != nil {
		return err
	}
	defer sink.Close()
	say := func(format string, args ...any) { fmt.Fprintf(e.stderr, "demo: "+format+"\n", args...) }
	cleanup, err := demoDatabase(ctx, e, &c.db, o.keepSchema, say)
	if err != nil {
		return err
	}
	defer cleanup()
	pool, err := c.db.connect(ctx, e, int32(o.producers+3*o.procs+2))
	if err != nil {
		return err
	}
	defer pool.Close()
	admin, err := outbox.NewAdmin(pool, c.db.table)
	if err != nil {
		return err
	}
	if err := admin.Migrate(ctx); err != nil {
		return err
	}
	say("migrated %s; %d producers will write %d orders x 3 events while %d dispatchers deliver them",
		c.db.table, o.producers, o.orders, o.procs)
	return demoDeliver(ctx, e, pool, admin, c.db.table, newDemoRecorder(sink, o.failRate), &o, logger, say)
}

// demoOpts are demo's own flags.
type demoOpts struct {
	lf                                logFlags
	orders, producers, procs, workers int
	failRate                          float64
	sinkURL                           string
	keepSchema                        bool
}

func (o *demoOpts) register(fs *flag.FlagSet) {
	fs.IntVar(&o.orders, "orders", 200, "orders to create (3 events each: created, paid, shipped)")
	fs.IntVar(&o.producers, "producers", 4, "concurrent producers")
	fs.IntVar(&o.procs, "dispatchers", 3, "dispatchers (as if on separate machines)")
	fs.IntVar(&o.workers, "workers", 4, "workers per dispatcher")
	fs.Float64Var(&o.failRate, "fail-rate", 0.05, "share of first attempts that fail transiently, to show retries")
	fs.StringVar(&o.sinkURL, "sink", "stdout:", "sink URL")
	fs.BoolVar(&o.keepSchema, "keep", false, "keep the demo schema (with --dsn)")
}

// demoDatabase points db at the demo's table: in a throwaway cluster when
// no database is named, else in a schema of its own in the given one.
// cleanup stops the cluster, or drops the schema unless keep is set.
func demoDatabase(ctx context.Context, e *env, db *dbFlags, keep bool, say func(string, ...any)) (cleanup func(), err error) {
	if db.resolveDSN(e) == "" && e.getenv("PGHOST") == "" && e.getenv("PGDATABASE") == "" {
		say("no --dsn, $OUTBOX_DSN or $PGHOST: starting a throwaway PostgreSQL cluster")
		c, err := pgcluster.Start(ctx, &pgcluster.Options{AsyncCommit: true})
		if err != nil {
			return nil, fmt.Errorf("starting a throwaway PostgreSQL: %w (give --dsn to use a running server)", err)
		}
		say("cluster up at 127.0.0.1:%d (PostgreSQL from %s)", c.Port, c.BinDir)
		db.dsn, db.table = c.DSN, "outbox"
		return func() {
			_ = c.Stop(context.WithoutCancel(ctx))
			say("removed the throwaway cluster")
		}, nil
	}
	schema := fmt.Sprintf("outboxd_demo_%d", os.Getpid())
	db.table = schema + ".outbox"
	say("using the given database, in a schema of its own: %s", schema)
	return func() {
		if keep {
			return
		}
		pool, err := db.connect(context.WithoutCancel(ctx), e, 1)
		if err == nil {
			_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			pool.Close()
		}
	}, nil
}

// demoDeliver runs the dispatchers and the producers until every order's
// events are delivered, then prints the summary.
func demoDeliver(ctx context.Context, e *env, pool *pgxpool.Pool, admin *outbox.Admin, table string, rec *demoRecorder,
	o *demoOpts, logger *slog.Logger, say func(string, ...any)) error {
	start := time.Now()
	dispatchers, stop, err := startDemoDispatchers(ctx, pool, rec, table, o, logger)
	if err != nil {
		return err
	}
	defer stop()
	produced, err := demoProduce(ctx, pool, table, o.orders, o.producers)
	if err != nil {
		return err
	}
	say("producers committed %d messages", produced)
	if err := demoWait(ctx, admin, rec, say); err != nil {
		return err
	}
	elapsed := time.Since(start)
	stop()
	st, err := admin.Status(ctx)
	if err != nil {
		return err
	}
	printDemoSummary(e.stderr, rec, st, dispatchers, produced, o.orders, elapsed)
	if rec.unique() != produced || st.Counts["dead"] != 0 {
		return fmt.Errorf("demo: %d of %d messages delivered", rec.unique(), produced)
	}
	return nil
}

// startDemoDispatchers starts o.procs dispatchers; stop, which may be
// called more than once, ends them and waits for them.
func startDemoDispatchers(ctx context.Context, pool *pgxpool.Pool, rec *demoRecorder, table string, o *demoOpts,
	logger *slog.Logger) (dispatchers []*outbox.Dispatcher, stop func(), err error) {
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop = func() {
		cancel()
		wg.Wait()
	}
	for i := range o.procs {
		d, err := outbox.NewDispatcher(pool, rec, &outbox.Config{
			Table: table, Owner: fmt.Sprintf("demo-dispatcher-%d", i+1), Workers: o.workers, BatchSize: 20,
			Ordered: true, RetryBase: 50 * time.Millisecond, RetryCap: time.Second, PollInterval: 200 * time.Millisecond,
			Logger: logger,
		})
		if err != nil {
			stop()
			return nil, nil, err
		}
		dispatchers = append(dispatchers, d)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := d.Run(runCtx); err != nil {
				logger.Error("dispatcher stopped", slog.Any("error", err))
			}
		}()
	}
	return dispatchers, stop, nil
}

// demoWait reports progress every half second until nothing is pending or
// processing.
func demoWait(ctx context.Context, admin *outbox.Admin, rec *demoRecorder, say func(string, ...any)) error {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := admin.Status(ctx)
		if err != nil {
			return err
		}
		left := st.Counts["pending"] + st.Counts["processing"]
		say("progress: %d delivered, %d waiting, %d retried, %d dead", rec.unique(), left, rec.failed.Load(), st.Counts["dead"])
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("interrupted")
		case <-tick.C:
		}
	}
}

func printDemoSummary(w io.Writer, rec *demoRecorder, st *outbox.Status, dispatchers []*outbox.Dispatcher, produced, orders int,
	elapsed time.Duration) {
	fmt.Fprintf(w, "\nsummary\n")
	fmt.Fprintf(w, "  enqueued             %d (in %d producer transactions)\n", produced, orders)
	fmt.Fprintf(w, "  delivered            %d unique ids\n", rec.unique())
	fmt.Fprintf(w, "  duplicates           %d\n", rec.duplicates())
	fmt.Fprintf(w, "  transient failures   %d (retried with full-jitter backoff)\n", rec.failed.Load())
	fmt.Fprintf(w, "  dead                 %d\n", st.Counts["dead"])
	fmt.Fprintf(w, "  order violations     %d (per order id, delivery follows id order)\n", rec.violations.Load())
	fmt.Fprintf(w, "  throughput           %.0f messages/s over %s\n", float64(rec.unique())/elapsed.Seconds(), elapsed.Round(time.Millisecond))
	for _, d := range dispatchers {
		s := d.Stats()
		fmt.Fprintf(w, "  %-20s %d done, %d retried, %d lost leases\n", d.Config().Owner, s.Done, s.Retried, s.LeaseLost)
	}
}

func demoProduce(ctx context.Context, pool *pgxpool.Pool, table string, orders, producers int) (int, error) {
	var next atomic.Int64
	var count atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	p := outbox.Producer{Table: table}
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := int(next.Add(1))
				if n > orders || ctx.Err() != nil {
					return
				}
				id := fmt.Sprintf("order-%d", n)
				amount := 10 + rand.IntN(990)
				// One producer transaction per order: the business change
				// and its events commit together.
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					ids, err := p.Enqueue(ctx, tx,
						outbox.NewMessage{AggregateType: "order", AggregateID: id, EventType: "OrderCreated", Payload: map[string]any{"order": id, "amount": amount}},
						outbox.NewMessage{AggregateType: "order", AggregateID: id, EventType: "OrderPaid", Payload: map[string]any{"order": id, "amount": amount}},
						outbox.NewMessage{AggregateType: "order", AggregateID: id, EventType: "OrderShipped", Payload: map[string]any{"order": id}},
					)
					count.Add(int64(len(ids)))
					return err
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return int(count.Load()), nil
}

// demoRecorder wraps the demo's sink: it injects transient failures on some
// first attempts and counts deliveries, duplicates and per-order ordering.
type demoRecorder struct {
	next     outbox.Sink
	failRate float64

	mu         sync.Mutex
	seen       map[int64]int
	lastByAgg  map[string]int64
	failed     atomic.Int64
	violations atomic.Int64
}

func newDemoRecorder(next outbox.Sink, failRate float64) *demoRecorder {
	return &demoRecorder{next: next, failRate: failRate, seen: map[int64]int{}, lastByAgg: map[string]int64{}}
}

func (r *demoRecorder) Publish(ctx context.Context, m *outbox.Message) error {
	if m.Attempt == 1 && rand.Float64() < r.failRate {
		r.failed.Add(1)
		return outbox.Retryable(errors.New("demo: injected transient failure"))
	}
	if err := r.next.Publish(ctx, m); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[m.ID]++
	if last, ok := r.lastByAgg[m.AggregateID]; ok && last > m.ID {
		r.violations.Add(1)
	}
	r.lastByAgg[m.AggregateID] = max(r.lastByAgg[m.AggregateID], m.ID)
	return nil
}

func (r *demoRecorder) Close() error { return nil }

func (r *demoRecorder) unique() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *demoRecorder) duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.seen {
		n += c - 1
	}
	return n
}
