package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/service"
)

// arrivals records when a local webhook receiver first got each message,
// keyed by the row id the HTTP sink sends in Outbox-Row-Id.
type arrivals struct {
	mu   sync.Mutex
	at   map[int64]time.Time
	last time.Time
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	id, err := strconv.ParseInt(r.Header.Get("Outbox-Row-Id"), 10, 64)
	if err != nil {
		http.Error(w, "no numeric Outbox-Row-Id", http.StatusUnprocessableEntity)
		return
	}
	a.mu.Lock()
	if _, seen := a.at[id]; !seen {
		a.at[id] = now
		a.last = now
	}
	a.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.at)
}

// latency measures end-to-end delivery latency at a steady insert rate:
// Producers producers commit single-row transactions at Rate in total for
// Duration, while a dispatcher delivers them through the HTTP sink to a
// receiver in this process. Latency runs from a row's created_at (its
// transaction's start, on the database's clock, which is this machine's) to
// the receiver getting the request.
func (b *Benchmarker) latency(ctx context.Context) error {
	c := b.cfg
	t, drop, err := b.table(ctx, 0, 0)
	defer drop()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	rec := &arrivals{at: make(map[int64]time.Time, int(float64(c.Rate)*c.Duration.Seconds())+16)}
	srv := &http.Server{Handler: rec, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	sink, err := c.HTTPSink("http://" + ln.Addr().String() + "/")
	if err != nil {
		return err
	}
	defer sink.Close()

	cfg, err := c.Dispatcher(t.name)
	if err != nil {
		return err
	}
	d, err := outbox.NewDispatcher(b.pool, sink, cfg)
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = d.Stop() }()
	// Let the dispatcher settle into its idle state (listening, registered)
	// as it would be between bursts in production.
	if !service.Sleep(ctx, 200*time.Millisecond) {
		return errors.New("interrupted")
	}
	fmt.Fprintf(c.Stdout, "latency: %d messages/s from %d producers for %s, HTTP sink to %s\n",
		c.Rate, c.Producers, c.Duration, ln.Addr())

	start := time.Now()
	ids, err := b.produceAtRate(ctx, t.name)
	if err != nil {
		return err
	}
	// Wait for the stragglers.
	giveUp := time.Now().Add(30 * time.Second)
	for rec.count() < len(ids) && time.Now().Before(giveUp) {
		if !service.Sleep(ctx, 5*time.Millisecond) {
			return errors.New("interrupted")
		}
	}
	if err := d.Stop(); err != nil {
		return err
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.at) < len(ids) {
		return fmt.Errorf("only %d of %d messages arrived within 30s of the last insert", len(rec.at), len(ids))
	}
	lags, err := b.latencies(ctx, t, rec.at)
	if err != nil {
		return err
	}
	slices.Sort(lags)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(c.Stdout, "latency p50 %s p90 %s p99 %s max %s\n",
		ms(percentile(lags, 0.50)), ms(percentile(lags, 0.90)), ms(percentile(lags, 0.99)), ms(percentile(lags, 1)))
	fmt.Fprintf(c.Stdout, "throughput %.0f messages/s\n", float64(len(lags))/rec.last.Sub(start).Seconds())
	st := d.Stats()
	fmt.Fprintf(c.Stderr, "  claims %d (%.2f rows each), finalizes %d, wake-ups %d\n",
		st.Claims, float64(st.Claimed)/float64(max(st.Claims, 1)), st.Finalizes, st.Wakeups)
	return nil
}

// latencies pairs each arrival with its row's created_at.
func (b *Benchmarker) latencies(ctx context.Context, t *benchTable, at map[int64]time.Time) ([]time.Duration, error) {
	ids := make([]int64, 0, len(at))
	for id := range at {
		ids = append(ids, id)
	}
	rows, err := b.pool.Query(ctx, t.sql("created_at.sql"), ids)
	if err != nil {
		return nil, err
	}
	lags := make([]time.Duration, 0, len(ids))
	var id int64
	var created time.Time
	_, err = pgx.ForEachRow(rows, []any{&id, &created}, func() error {
		lags = append(lags, at[id].Sub(created))
		return nil
	})
	return lags, err
}

// produceAtRate commits single-row transactions at Rate per second in
// total across Producers producers, each on its own schedule (open loop: a
// producer that falls behind catches up without waiting), for Duration. It
// returns the ids.
// latencyAggregates is how many aggregates the latency run's messages are
// spread over.
const latencyAggregates = 1000

func (b *Benchmarker) produceAtRate(ctx context.Context, table string) ([]int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		ids      []int64
		firstErr error
		failed   atomic.Bool
		wg       sync.WaitGroup
	)
	producers := b.cfg.Producers
	p := outbox.Producer{Table: table}
	interval := time.Duration(float64(time.Second) * float64(producers) / float64(b.cfg.Rate))
	start := time.Now()
	end := start.Add(b.cfg.Duration)
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Stagger the producers evenly over one interval.
			next := start.Add(interval * time.Duration(i) / time.Duration(producers))
			var mine []int64
			defer func() { mu.Lock(); ids = append(ids, mine...); mu.Unlock() }()
			for n := i; next.Before(end); n += producers {
				if wait := time.Until(next); wait > 0 && !service.Sleep(ctx, wait) {
					return
				}
				next = next.Add(interval)
				// Spread over latencyAggregates aggregates, as real traffic
				// is: with one, an ordered dispatcher (--ordered, shard
				// leases) delivers one message per round trip.
				msg := benchMessage
				msg.AggregateID = strconv.Itoa(n % latencyAggregates)
				var got []int64
				err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					var err error
					got, err = p.Enqueue(ctx, tx, msg)
					return err
				})
				if err != nil {
					if failed.CompareAndSwap(false, true) {
						firstErr = err
						cancel()
					}
					return
				}
				mine = append(mine, got...)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return ids, ctx.Err()
}
