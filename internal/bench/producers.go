package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outbox"
)

// producers measures how much the wake-up costs producers: concurrent
// single-row insert transactions against a table with no trigger, with the
// outbox's trigger while a dispatcher polls or listens and drains, and with
// a naive per-row pg_notify trigger, for reference.
func (b *Benchmarker) producers(ctx context.Context) error {
	c := b.cfg
	type phase struct {
		name  string
		setup func(ctx context.Context, t *benchTable) (func(), error)
	}
	runDispatcher := func(ctx context.Context, t *benchTable, noNotify bool) (func(), error) {
		cfg, err := c.Dispatcher(t.name)
		if err != nil {
			return nil, err
		}
		cfg.DisableNotify = noNotify
		d, err := outbox.NewDispatcher(b.pool, nullSink(), cfg)
		if err != nil {
			return nil, err
		}
		if err := d.Start(ctx); err != nil {
			return nil, err
		}
		return func() { _ = d.Stop() }, nil
	}
	phases := []phase{
		{"no trigger, polling dispatcher", func(ctx context.Context, t *benchTable) (func(), error) {
			if err := t.admin.DropWakeTrigger(ctx); err != nil {
				return nil, err
			}
			return runDispatcher(ctx, t, true)
		}},
		{"outboxd wake trigger, polling dispatcher", func(ctx context.Context, t *benchTable) (func(), error) {
			return runDispatcher(ctx, t, true)
		}},
		{"outboxd wake trigger, listening dispatcher", func(ctx context.Context, t *benchTable) (func(), error) {
			return runDispatcher(ctx, t, false)
		}},
		{"per-row pg_notify trigger (naive), polling dispatcher", func(ctx context.Context, t *benchTable) (func(), error) {
			if err := t.admin.DropWakeTrigger(ctx); err != nil {
				return nil, err
			}
			if _, err := b.pool.Exec(ctx, t.sql("naive_trigger.sql"), pgx.QueryExecModeSimpleProtocol); err != nil {
				return nil, err
			}
			return runDispatcher(ctx, t, true)
		}},
	}
	// Phases alternate over several rounds and the median counts, so a
	// burst of load elsewhere on the machine skews one sample, not the result.
	rates := make([][]float64, len(phases))
	for round := 1; round <= c.Rounds; round++ {
		for i, ph := range phases {
			t, drop, err := b.table(ctx, 0, 0)
			if err != nil {
				drop()
				return err
			}
			stop, err := ph.setup(ctx, t)
			if err != nil {
				drop()
				return err
			}
			rate, err := b.produce(ctx, t.name)
			stop()
			drop()
			if err != nil {
				return err
			}
			rates[i] = append(rates[i], rate)
			fmt.Fprintf(c.Stderr, "  round %d: %s: %.0f inserts/s\n", round, ph.name, rate)
		}
	}
	base := median(rates[0])
	for i, ph := range phases {
		m := median(rates[i])
		fmt.Fprintf(c.Stdout, "%-55s %7.0f inserts/s  (%.1f%% of no trigger; median of %d)\n", ph.name, m, 100*m/base, len(rates[i]))
	}
	return nil
}

// produce runs Producers producers committing single-row transactions as
// fast as they can for Duration and returns the rate of all of them.
func (b *Benchmarker) produce(ctx context.Context, table string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Duration)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	p := outbox.Producer{Table: table}
	start := time.Now()
	for range b.cfg.Producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
					_, err := p.Enqueue(ctx, tx, benchMessage)
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

// benchMessage is what producers insert.
var benchMessage = outbox.NewMessage{AggregateType: "order", AggregateID: "1", EventType: "OrderCreated", Payload: []byte(`{"n":1}`)}
