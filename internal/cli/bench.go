package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// benchOpts are the inputs of one bench run.
type benchOpts struct {
	messages  int
	doneRows  int
	variant   string
	rf        runFlags
	keep      bool
	producers int
	rounds    int
	duration  time.Duration
	latency   bool
	rate      int
}

func runBench(ctx context.Context, e *env, args []string) error {
	var (
		db dbFlags
		o  benchOpts
		lf logFlags
	)
	fs := newFlagSet(e, "bench", "bench [--messages N] [--done-rows N] [--variant lease|seed|both] [--sink URL] [--producers N --duration DUR] [--latency --rate N --producers N --duration DUR]")
	db.register(fs)
	o.rf.register(fs, "null:")
	lf.register(fs)
	fs.IntVar(&o.messages, "messages", 200000, "messages to pre-insert and drain")
	fs.IntVar(&o.doneRows, "done-rows", 0, "done rows to pre-fill the table with (a claim must not slow down with them)")
	fs.StringVar(&o.variant, "variant", "lease", "lease (outboxd), seed (the article's per-row design) or both")
	fs.IntVar(&o.producers, "producers", 0, "instead of draining: measure producer insert rates with N concurrent producers (NOTIFY cost)")
	durVar(fs, &o.duration, "duration", 5*time.Second, "length of each producer phase")
	fs.IntVar(&o.rounds, "rounds", 3, "producer phases are alternated this many times; the median counts")
	fs.BoolVar(&o.keep, "keep", false, "keep the bench schema afterwards")
	fs.BoolVar(&o.latency, "latency", false, "instead of draining: measure delivery latency at --rate inserts/s from --producers (default 4) through the HTTP sink to a local receiver")
	fs.IntVar(&o.rate, "rate", 1000, "with --latency: single-row insert transactions per second, across all producers")
	if err := parseLayered(e, fs, &db, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	lf.level = cmpString(lf.level, "warn")
	logger, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	if o.messages < 1 || o.doneRows < 0 || o.producers < 0 || o.rounds < 1 {
		return usagef("--messages must be positive and --done-rows, --producers not negative")
	}
	if o.latency {
		sinkSet := false
		fs.Visit(func(f *flag.Flag) { sinkSet = sinkSet || f.Name == "sink" })
		if sinkSet {
			return usagef("--latency delivers through the HTTP sink to its own local receiver; drop --sink")
		}
		if o.producers == 0 {
			o.producers = 4
		}
		if o.rate < 1 {
			return usagef("--rate must be positive, got %d", o.rate)
		}
	}
	if !slices.Contains([]string{"lease", "seed", "both"}, o.variant) {
		return usagef("--variant must be lease, seed or both, got %q", o.variant)
	}
	if _, err := o.rf.config("bench.outbox", logger); err != nil {
		return err
	}
	sink, err := openSink(o.rf.sink, &sinkEnv{stdout: io.Discard, logger: logger})
	if err != nil {
		return err
	}
	defer sink.Close()
	pool, err := db.connect(ctx, e, int32(max(8, o.producers+4)))
	if err != nil {
		return err
	}
	defer pool.Close()
	host, _ := os.Hostname()
	sinkName := sinkutil.RedactURL(o.rf.sink)
	if o.latency {
		sinkName = "http (local receiver)"
	}
	fmt.Fprintf(e.stdout, "outboxd bench on %s: sink %s, workers %d, batch %d\n", host, sinkName, o.rf.workers, o.rf.batch)
	if o.latency {
		return benchLatency(ctx, e, pool, &o, logger)
	}
	if o.producers > 0 {
		return benchProducers(ctx, e, pool, &o, logger)
	}
	variants := []string{o.variant}
	if o.variant == "both" {
		variants = []string{"seed", "lease"}
	}
	rates := map[string]float64{}
	for _, v := range variants {
		res, err := benchDrain(ctx, e, pool, sink, &o, v, logger)
		if err != nil {
			return err
		}
		rates[v] = res
	}
	if len(rates) == 2 && rates["seed"] > 0 {
		fmt.Fprintf(e.stdout, "lease / seed: %.1fx\n", rates["lease"]/rates["seed"])
	}
	return nil
}

func cmpString(s, def string) string {
	if s == "info" {
		return def
	}
	return s
}

// benchSchema creates a fresh schema with a migrated outbox table holding
// doneRows done rows and n pending rows.
func benchSchema(ctx context.Context, e *env, pool *pgxpool.Pool, o *benchOpts, n int) (string, func(), error) {
	schema := fmt.Sprintf("outboxd_bench_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	table := schema + ".outbox"
	drop := func() {
		if o.keep {
			fmt.Fprintf(e.stdout, "kept table %s\n", table)
			return
		}
		_, _ = pool.Exec(context.WithoutCancel(ctx), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}
	a, err := outbox.NewAdmin(pool, table)
	if err != nil {
		return "", drop, err
	}
	if err := a.Migrate(ctx); err != nil {
		return "", drop, cleanErr(err)
	}
	qt := pgx.Identifier{schema, "outbox"}.Sanitize()
	fill := func(count int, status string) error {
		for done := 0; done < count; {
			chunk := min(100000, count-done)
			_, err := pool.Exec(ctx, `INSERT INTO `+qt+` (aggregate_type, aggregate_id, event_type, payload, status, done_at)
				SELECT 'order', (g % 1000)::text, 'OrderCreated', jsonb_build_object('n', g, 'note', 'benchmark message'),
				       $2, CASE WHEN $2 = 'done' THEN now() END
				FROM generate_series(1, $1) AS g`, chunk, status)
			if err != nil {
				return err
			}
			done += chunk
			if count >= 100000 {
				fmt.Fprintf(e.stderr, "  inserted %d/%d %s rows\n", done, count, status)
			}
		}
		return nil
	}
	if err := fill(o.doneRows, "done"); err != nil {
		return "", drop, err
	}
	if err := fill(n, "pending"); err != nil {
		return "", drop, err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+qt); err != nil {
		return "", drop, err
	}
	return table, drop, nil
}

// lagRecorder wraps a sink and records created_at-to-publish lag.
type lagRecorder struct {
	next outbox.Sink
	mu   sync.Mutex
	lags []time.Duration
}

func (l *lagRecorder) Publish(ctx context.Context, m *outbox.Message) error {
	err := l.next.Publish(ctx, m)
	lag := time.Since(m.CreatedAt)
	l.mu.Lock()
	l.lags = append(l.lags, lag)
	l.mu.Unlock()
	return err
}

func (l *lagRecorder) Close() error { return nil }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func benchDrain(ctx context.Context, e *env, pool *pgxpool.Pool, sink outbox.Sink, o *benchOpts, variant string, logger *slog.Logger) (float64, error) {
	fmt.Fprintf(e.stdout, "\n== %s: drain %d messages (table also holds %d done rows)\n", variant, o.messages, o.doneRows)
	table, drop, err := benchSchema(ctx, e, pool, o, o.messages)
	defer drop()
	if err != nil {
		return 0, err
	}
	rec := &lagRecorder{next: sink, lags: make([]time.Duration, 0, o.messages)}
	cfg, err := o.rf.config(table, logger)
	if err != nil {
		return 0, err
	}
	var roundTrips, commits int64
	start := time.Now()
	progressDone := benchProgress(ctx, e, func() int { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.lags) }, o.messages)
	switch variant {
	case "lease":
		d, err := outbox.NewDispatcher(pool, rec, cfg)
		if err != nil {
			progressDone()
			return 0, cleanErr(err)
		}
		err = d.Drain(ctx)
		progressDone()
		if err != nil {
			return 0, cleanErr(err)
		}
		st := d.Stats()
		roundTrips = st.Claims + st.Finalizes
		commits = roundTrips
	case "seed":
		rt, c, err := seedDrain(ctx, pool, rec, cfg)
		progressDone()
		if err != nil {
			return 0, err
		}
		roundTrips, commits = rt, c
	}
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return 0, errors.New("interrupted")
	}
	n := len(rec.lags)
	slices.Sort(rec.lags)
	rate := float64(n) / elapsed.Seconds()
	fmt.Fprintf(e.stdout, "delivered        %d in %s\n", n, elapsed.Round(time.Millisecond))
	fmt.Fprintf(e.stdout, "throughput       %.0f messages/s\n", rate)
	fmt.Fprintf(e.stdout, "round trips/msg  %.4f\n", float64(roundTrips)/float64(max(n, 1)))
	fmt.Fprintf(e.stdout, "commits/msg      %.4f\n", float64(commits)/float64(max(n, 1)))
	fmt.Fprintf(e.stdout, "delivery lag     p50 %s  p90 %s  p99 %s  max %s\n",
		percentile(rec.lags, 0.50).Round(time.Millisecond), percentile(rec.lags, 0.90).Round(time.Millisecond),
		percentile(rec.lags, 0.99).Round(time.Millisecond), percentile(rec.lags, 1).Round(time.Millisecond))
	return rate, nil
}

func benchProgress(ctx context.Context, e *env, count func() int, total int) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fmt.Fprintf(e.stderr, "  %d/%d delivered\n", count(), total)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// seedDrain runs the article's per-row dispatcher (claim transaction, then
// one fenced commit per message) with the same worker count until the table
// is drained. It returns round trips and commits.
func seedDrain(ctx context.Context, pool *pgxpool.Pool, sink outbox.Sink, cfg *outbox.Config) (int64, int64, error) {
	st, err := store.New(cfg.Table)
	if err != nil {
		return 0, 0, err
	}
	var roundTrips, commits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers)
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("seed-%d", w)
			var buf []store.Row
			for ctx.Err() == nil {
				rows, err := st.SeedClaim(ctx, pool, store.ClaimParams{
					Owner: owner, Batch: min(cfg.BatchSize, 50), Lease: cfg.Lease, MaxAttempts: cfg.MaxAttempts,
				}, buf)
				roundTrips.Add(4) // BEGIN, reap, claim, COMMIT
				commits.Add(1)
				if err != nil {
					errs <- err
					return
				}
				if len(rows) == 0 {
					return
				}
				for _, r := range rows {
					m := outbox.Message{ID: r.ID, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
						EventType: r.EventType, Payload: r.Payload, CreatedAt: r.CreatedAt, Attempt: r.Attempts,
						FencingToken: r.LeaseVersion}
					if err := sink.Publish(ctx, &m); err != nil {
						continue // the row's lease expires and it is claimed again
					}
					if _, err := st.SeedDone(ctx, pool, r.ID, r.LeaseVersion); err != nil {
						errs <- err
						return
					}
					roundTrips.Add(1)
					commits.Add(1)
				}
				buf = rows[:0]
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	return roundTrips.Load(), commits.Load(), nil
}

// benchProducers measures how much the wake-up costs producers: concurrent
// single-row insert transactions against a table with no trigger, with the
// outboxd trigger while a dispatcher listens and drains, and with a naive
// per-row pg_notify trigger, for reference.
func benchProducers(ctx context.Context, e *env, pool *pgxpool.Pool, o *benchOpts, logger *slog.Logger) error {
	type phase struct {
		name  string
		setup func(ctx context.Context, table string) (func(), error)
	}
	runDispatcher := func(ctx context.Context, table string, noNotify bool) (func(), error) {
		cfg, err := o.rf.config(table, logger)
		if err != nil {
			return nil, err
		}
		cfg.DisableNotify = noNotify
		d, err := outbox.NewDispatcher(pool, nullSink(), cfg)
		if err != nil {
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		return func() { _ = d.Stop() }, nil
	}
	phases := []phase{
		{"no trigger, polling dispatcher", func(ctx context.Context, table string) (func(), error) {
			s, _ := store.ParseTable(table)
			if _, err := pool.Exec(ctx, "DROP TRIGGER "+pgx.Identifier{s.Name + "_wake"}.Sanitize()+" ON "+quotedTable(table)); err != nil {
				return nil, err
			}
			return runDispatcher(ctx, table, true)
		}},
		{"outboxd wake trigger, polling dispatcher", func(ctx context.Context, table string) (func(), error) {
			return runDispatcher(ctx, table, true)
		}},
		{"outboxd wake trigger, listening dispatcher", func(ctx context.Context, table string) (func(), error) {
			return runDispatcher(ctx, table, false)
		}},
		{"per-row pg_notify trigger (naive), polling dispatcher", func(ctx context.Context, table string) (func(), error) {
			s, _ := store.ParseTable(table)
			fn := pgx.Identifier{s.Schema, "naive_notify"}.Sanitize()
			_, err := pool.Exec(ctx, "DROP TRIGGER "+pgx.Identifier{s.Name + "_wake"}.Sanitize()+" ON "+quotedTable(table)+";"+
				"CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('naive', NEW.id::text); RETURN NULL; END $$;"+
				"CREATE TRIGGER naive AFTER INSERT ON "+quotedTable(table)+" FOR EACH ROW EXECUTE FUNCTION "+fn+"()", pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				return nil, err
			}
			return runDispatcher(ctx, table, true)
		}},
	}
	// Phases alternate over several rounds and the median counts, so a
	// burst of load elsewhere on the machine skews one sample, not the result.
	rates := make([][]float64, len(phases))
	for round := 1; round <= o.rounds; round++ {
		for i, ph := range phases {
			table, drop, err := benchSchema(ctx, e, pool, &benchOpts{keep: o.keep}, 0)
			if err != nil {
				drop()
				return err
			}
			stop, err := ph.setup(ctx, table)
			if err != nil {
				drop()
				return err
			}
			rate, err := produce(ctx, pool, table, o.producers, o.duration)
			stop()
			drop()
			if err != nil {
				return err
			}
			rates[i] = append(rates[i], rate)
			fmt.Fprintf(e.stderr, "  round %d: %s: %.0f inserts/s\n", round, ph.name, rate)
		}
	}
	base := median(rates[0])
	for i, ph := range phases {
		m := median(rates[i])
		fmt.Fprintf(e.stdout, "%-55s %7.0f inserts/s  (%.1f%% of no trigger; median of %d)\n", ph.name, m, 100*m/base, len(rates[i]))
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func produce(ctx context.Context, pool *pgxpool.Pool, table string, producers int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	p := outbox.Producer{Table: table}
	start := time.Now()
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := p.Enqueue(ctx, tx, outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "OrderCreated", Payload: []byte(`{"n":1}`)})
					return err
				})
				if err != nil {
					if ctx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds(), firstErr
}
