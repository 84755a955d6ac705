package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/service"
)

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

func (l *lagRecorder) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lags)
}

// drain pre-inserts Messages rows and delivers them with variant ("lease":
// the dispatcher, "seed": the reference), then prints the figures. It
// returns the throughput.
func (b *Benchmarker) drain(ctx context.Context, variant string) (float64, error) {
	c := b.cfg
	fmt.Fprintf(c.Stdout, "\n== %s: drain %d messages (table also holds %d done rows)\n", variant, c.Messages, c.DoneRows)
	b.checkpoint(ctx)
	t, drop, err := b.table(ctx, c.DoneRows, c.Messages)
	defer drop()
	if err != nil {
		return 0, err
	}
	rec := &lagRecorder{next: c.Sink, lags: make([]time.Duration, 0, c.Messages)}
	cfg, err := c.Dispatcher(t.name)
	if err != nil {
		return 0, err
	}
	var roundTrips, commits int64
	release, err := b.hold(ctx)
	if err != nil {
		return 0, err
	}
	defer release()
	spent := startCost(ctx, b.pool, t)
	start := time.Now()
	progressDone := b.progress(ctx, rec.count, c.Messages)
	switch variant {
	case "lease":
		d, err := outbox.NewDispatcher(b.pool, rec, cfg)
		if err != nil {
			progressDone()
			return 0, err
		}
		err = d.Drain(ctx)
		progressDone()
		if err != nil {
			return 0, err
		}
		st := d.Stats()
		roundTrips = st.Claims + st.Finalizes
		commits = roundTrips
	case "seed":
		rt, cm, err := newReference(t, cfg).drain(ctx, b.pool, rec)
		progressDone()
		if err != nil {
			return 0, err
		}
		roundTrips, commits = rt, cm
	}
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return 0, errors.New("interrupted")
	}
	n := len(rec.lags)
	slices.Sort(rec.lags)
	rate := float64(n) / elapsed.Seconds()
	fmt.Fprintf(c.Stdout, "delivered        %d in %s\n", n, elapsed.Round(time.Millisecond))
	fmt.Fprintf(c.Stdout, "throughput       %.0f messages/s\n", rate)
	fmt.Fprintf(c.Stdout, "round trips/msg  %.4f\n", float64(roundTrips)/float64(max(n, 1)))
	fmt.Fprintf(c.Stdout, "commits/msg      %.4f\n", float64(commits)/float64(max(n, 1)))
	spent.report(ctx, func(format string, args ...any) { fmt.Fprintf(c.Stdout, format, args...) }, n)
	fmt.Fprintf(c.Stdout, "delivery lag     p50 %s  p90 %s  p99 %s  max %s\n",
		percentile(rec.lags, 0.50).Round(time.Millisecond), percentile(rec.lags, 0.90).Round(time.Millisecond),
		percentile(rec.lags, 0.99).Round(time.Millisecond), percentile(rec.lags, 1).Round(time.Millisecond))
	return rate, nil
}

// hold starts what HoldSnapshot and HoldWriter ask for, each on a
// connection of its own, and returns what ends them.
func (b *Benchmarker) hold(ctx context.Context) (func(), error) {
	var held []*pgxpool.Conn
	release := func() {
		for _, c := range held {
			_, _ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
			c.Release()
		}
	}
	for _, h := range []struct {
		on         bool
		begin, say string
	}{
		{b.cfg.HoldSnapshot, "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_catalog.pg_class",
			"a REPEATABLE READ snapshot held by another session for the whole drain"},
		{b.cfg.HoldWriter, "BEGIN; SELECT pg_catalog.pg_current_xact_id()",
			"a writing transaction left open by another session for the whole drain"},
	} {
		if !h.on {
			continue
		}
		c, err := b.pool.Acquire(ctx)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, c)
		if _, err := c.Exec(ctx, h.begin); err != nil {
			release()
			return nil, err
		}
		fmt.Fprintf(b.cfg.Stdout, "held             %s\n", h.say)
	}
	return release, nil
}

// progress prints how many of total count says are delivered every two
// seconds, until the returned function is called.
func (b *Benchmarker) progress(ctx context.Context, count func() int, total int) func() {
	var r service.Runner
	_ = r.Start(ctx, func(ctx context.Context) error {
		for service.Sleep(ctx, 2*time.Second) {
			fmt.Fprintf(b.cfg.Stderr, "  %d/%d delivered\n", count(), total)
		}
		return nil
	})
	return func() { _ = r.Stop() }
}
