package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// completer writes the workers' verdicts in batches: whatever has
// accumulated while the previous statement ran goes in the next one, so
// batches grow with load and an idle system finalizes at once. After each
// batch it forgets the batch's leases and gives their slots back.
type completer struct {
	mode   lease.Mode
	slots  *slots
	leases *lease.Registry
	chains *chains // nil unless the mode chains an aggregate's messages
	// confirm reads which writes of a failed try were made all the same.
	confirm func(context.Context, []store.RowWrite) ([]bool, error)
	// settle reports each verdict once its write was tried.
	settle func(v *verdict, held bool)
	engine

	batch  []verdict
	writes []store.RowWrite
	keys   []store.Lease
}

func newCompleter(d *Dispatcher, mode lease.Mode, s *slots, leases *lease.Registry, maxBatch int) *completer {
	return &completer{
		mode: mode, slots: s, leases: leases, settle: d.settle, engine: d.engine(),
		confirm: func(ctx context.Context, w []store.RowWrite) ([]bool, error) {
			return d.store.FinalizeWritten(ctx, d.pool, w)
		},
		batch: make([]verdict, 0, maxBatch),
	}
}

// run finalizes verdicts until in is closed.
func (c *completer) run(in <-chan verdict) {
	for v := range in {
		c.batch = append(c.batch[:0], v)
	gather:
		for len(c.batch) < cap(c.batch) {
			select {
			case v, ok := <-in:
				if !ok {
					break gather
				}
				c.batch = append(c.batch, v)
			default:
				break gather
			}
		}
		c.finalize(c.batch)
		c.slots.give(len(c.batch))
	}
}

// finalize writes one batch and settles each verdict. When the write gives
// up, the rows stay processing; their leases expire and they are claimed
// again: delivery is at least once, never lost.
func (c *completer) finalize(batch []verdict) {
	c.writes, c.keys = c.writes[:0], c.keys[:0]
	for i := range batch {
		c.writes = append(c.writes, batch[i].write)
		c.keys = append(c.keys, batch[i].claim.lease())
	}
	start := c.clock.Now()
	defer c.leases.Forget(c.keys)
	held, err := c.write(c.writes, c.keys)
	c.mode.Settled(c.writes)
	if c.chains != nil {
		c.chains.settled(batch, held)
	}
	if err != nil {
		c.log.Error("giving up on finalize; rows will be re-claimed after their lease", slog.Int("rows", len(batch)))
		c.hook.OnFinalize(FinalizeEvent{Rows: len(batch), Duration: c.clock.Since(start), Err: err})
		return
	}
	lost := 0
	for _, h := range held {
		if !h {
			lost++
		}
	}
	c.hook.OnFinalize(FinalizeEvent{Rows: len(batch), LeaseLost: lost, Duration: c.clock.Since(start)})
	for i := range batch {
		c.settle(&batch[i], held[i])
	}
}

// write runs the finalize statement, retrying while the batch's leases may
// still hold (a database restart or failover takes seconds): every try is
// fenced, so a late success is still correct, and each give-up means
// re-deliveries. It returns, per write, whether it held.
func (c *completer) write(writes []store.RowWrite, keys []store.Lease) ([]bool, error) {
	giveUp := c.clock.Now().Add(2 * time.Second)
	if last := c.leases.LastDeadline(keys); last.After(giveUp) {
		giveUp = last
	}
	for attempt := 0; ; attempt++ {
		// Finalize must not be cut short by shutdown: a publish that succeeded
		// and is not recorded would be delivered again.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := c.clock.Now()
		held, err := c.mode.Finalize(ctx, writes)
		if err == nil && attempt > 0 {
			err = c.confirmWritten(ctx, writes, held)
		}
		cancel()
		c.stats.finalizes.Add(1)
		if err == nil || c.clock.Now().After(giveUp) {
			return held, err
		}
		c.hook.OnFinalize(FinalizeEvent{Rows: len(writes), Duration: c.clock.Since(start), Err: err, Retrying: true})
		c.log.Error("finalize failed; retrying", slog.Any("error", err), slog.Int("rows", len(writes)), slog.Int("try", attempt+1))
		time.Sleep(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second))
	}
}

// confirmWritten marks held the writes an earlier try already made. A try
// that failed may have failed after its commit (the reply lost with the
// connection), and the retry then finds those rows no longer processing:
// without this they would be reported as lost leases.
func (c *completer) confirmWritten(ctx context.Context, writes []store.RowWrite, held []bool) error {
	var unheld []store.RowWrite
	var at []int
	for i, h := range held {
		if !h {
			unheld, at = append(unheld, writes[i]), append(at, i)
		}
	}
	if len(unheld) == 0 {
		return nil
	}
	written, err := c.confirm(ctx, unheld)
	if err != nil {
		return err
	}
	for k, i := range at {
		held[i] = written[k]
	}
	return nil
}
