package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/pgcluster"
)

// runDemo runs the whole pipeline for a newcomer: a database (the one named
// by --dsn or the environment, else a throwaway cluster), concurrent
// producers writing orders in their own transactions, several dispatchers
// delivering them in order per order id, a few injected transient failures
// to show retries, progress, and a summary.
func runDemo(ctx context.Context, e *env, args []string) error {
	var (
		db         dbFlags
		lf         logFlags
		orders     int
		producers  int
		procs      int
		workers    int
		failRate   float64
		sinkURL    string
		keepSchema bool
	)
	fs := newFlagSet(e, "demo", "demo [--orders N] [--producers N] [--dispatchers N] [--sink URL] [--dsn DSN]")
	db.register(fs)
	lf.register(fs)
	fs.IntVar(&orders, "orders", 200, "orders to create (3 events each: created, paid, shipped)")
	fs.IntVar(&producers, "producers", 4, "concurrent producers")
	fs.IntVar(&procs, "dispatchers", 3, "dispatchers (as if on separate machines)")
	fs.IntVar(&workers, "workers", 4, "workers per dispatcher")
	fs.Float64Var(&failRate, "fail-rate", 0.05, "share of first attempts that fail transiently, to show retries")
	fs.StringVar(&sinkURL, "sink", "stdout:", "sink URL")
	fs.BoolVar(&keepSchema, "keep", false, "keep the demo schema (with --dsn)")
	if err := parseLayered(e, fs, &db, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	if orders < 1 || producers < 1 || procs < 1 || workers < 1 {
		return usagef("--orders, --producers, --dispatchers and --workers must be positive")
	}
	if failRate < 0 || failRate >= 1 {
		return usagef("--fail-rate must be in [0, 1)")
	}
	lf.level = cmpString(lf.level, "warn")
	logger, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	sink, err := openSink(sinkURL, &sinkEnv{stdout: e.stdout, logger: logger})
	if err != nil {
		return err
	}
	defer sink.Close()
	say := func(format string, args ...any) { fmt.Fprintf(e.stderr, "demo: "+format+"\n", args...) }

	table := "outbox"
	if db.resolveDSN(e) == "" && e.getenv("PGHOST") == "" && e.getenv("PGDATABASE") == "" {
		say("no --dsn, $OUTBOX_DSN or $PGHOST: starting a throwaway PostgreSQL cluster")
		c, err := pgcluster.Start(ctx, &pgcluster.Options{AsyncCommit: true})
		if err != nil {
			return fmt.Errorf("starting a throwaway PostgreSQL: %w (give --dsn to use a running server)", err)
		}
		defer func() {
			_ = c.Stop(context.WithoutCancel(ctx))
			say("removed the throwaway cluster")
		}()
		say("cluster up at 127.0.0.1:%d (PostgreSQL from %s)", c.Port, c.BinDir)
		db.dsn = c.DSN
	} else {
		schema := fmt.Sprintf("outboxd_demo_%d", os.Getpid())
		table = schema + ".outbox"
		say("using the given database, in a schema of its own: %s", schema)
		defer func() {
			if keepSchema {
				return
			}
			pool, err := db.connect(context.WithoutCancel(ctx), e, 1)
			if err == nil {
				_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				pool.Close()
			}
		}()
	}
	db.table = table
	pool, err := db.connect(ctx, e, int32(producers+3*procs+2))
	if err != nil {
		return err
	}
	defer pool.Close()
	admin, err := outbox.NewAdmin(pool, table)
	if err != nil {
		return err
	}
	if err := admin.Migrate(ctx); err != nil {
		return err
	}
	say("migrated %s; %d producers will write %d orders x 3 events while %d dispatchers deliver them",
		table, producers, orders, procs)

	rec := newDemoRecorder(sink, failRate)
	start := time.Now()
	runCtx, stopDispatchers := context.WithCancel(ctx)
	defer stopDispatchers()
	var dwg sync.WaitGroup
	dispatchers := make([]*outbox.Dispatcher, procs)
	for i := range procs {
		d, err := outbox.NewDispatcher(pool, rec, &outbox.Config{
			Table: table, Owner: fmt.Sprintf("demo-dispatcher-%d", i+1), Workers: workers, BatchSize: 20,
			Ordered: true, RetryBase: 50 * time.Millisecond, RetryCap: time.Second, PollInterval: 200 * time.Millisecond,
			Logger: logger,
		})
		if err != nil {
			return err
		}
		dispatchers[i] = d
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			if err := d.Run(runCtx); err != nil {
				logger.Error("dispatcher stopped", slog.Any("error", err))
			}
		}()
	}

	produced, err := demoProduce(ctx, pool, table, orders, producers)
	if err != nil {
		return err
	}
	say("producers committed %d messages", produced)

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
			break
		}
		select {
		case <-ctx.Done():
			stopDispatchers()
			dwg.Wait()
			return errors.New("interrupted")
		case <-tick.C:
		}
	}
	elapsed := time.Since(start)
	stopDispatchers()
	dwg.Wait()
	st, err := admin.Status(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "\nsummary\n")
	fmt.Fprintf(e.stderr, "  enqueued             %d (in %d producer transactions)\n", produced, orders)
	fmt.Fprintf(e.stderr, "  delivered            %d unique ids\n", rec.unique())
	fmt.Fprintf(e.stderr, "  duplicates           %d\n", rec.duplicates())
	fmt.Fprintf(e.stderr, "  transient failures   %d (retried with full-jitter backoff)\n", rec.failed.Load())
	fmt.Fprintf(e.stderr, "  dead                 %d\n", st.Counts["dead"])
	fmt.Fprintf(e.stderr, "  order violations     %d (per order id, delivery follows id order)\n", rec.violations.Load())
	fmt.Fprintf(e.stderr, "  throughput           %.0f messages/s over %s\n", float64(rec.unique())/elapsed.Seconds(), elapsed.Round(time.Millisecond))
	for _, d := range dispatchers {
		s := d.Stats()
		fmt.Fprintf(e.stderr, "  %-20s %d done, %d retried, %d lost leases\n", d.Config().Owner, s.Done, s.Retried, s.LeaseLost)
	}
	if rec.unique() != produced || st.Counts["dead"] != 0 {
		return fmt.Errorf("demo: %d of %d messages delivered", rec.unique(), produced)
	}
	return nil
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
