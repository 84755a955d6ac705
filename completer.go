package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/store"
)

// completer writes the workers' verdicts in batches: whatever has
// accumulated while the previous statement ran goes in the next one, so
// batches grow with load and an idle system finalizes at once. After each
// batch it forgets the batch's leases and gives their slots back.
type completer struct {
	d      *Dispatcher
	slots  *slots
	leases *leaseRegistry

	batch  []verdict
	writes []store.RowWrite
	keys   []store.Lease
}

func newCompleter(d *Dispatcher, s *slots, leases *leaseRegistry, maxBatch int) *completer {
	return &completer{d: d, slots: s, leases: leases, batch: make([]verdict, 0, maxBatch)}
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
	start := time.Now()
	defer c.leases.forget(c.keys)
	held, err := c.write(c.writes, c.keys)
	if c.d.shards != nil {
		c.d.shards.settled(c.writes)
	}
	if err != nil {
		c.d.log.Error("giving up on finalize; rows will be re-claimed after their lease", slog.Int("rows", len(batch)))
		c.d.hook.OnFinalize(FinalizeEvent{Rows: len(batch), Duration: time.Since(start), Err: err})
		return
	}
	lost := 0
	for _, h := range held {
		if !h {
			lost++
		}
	}
	c.d.hook.OnFinalize(FinalizeEvent{Rows: len(batch), LeaseLost: lost, Duration: time.Since(start)})
	for i := range batch {
		c.d.settle(&batch[i], held[i])
	}
}

// write runs the finalize statement, retrying while the batch's leases may
// still hold (a database restart or failover takes seconds): every try is
// fenced, so a late success is still correct, and each give-up means
// re-deliveries. It returns, per write, whether it held.
func (c *completer) write(writes []store.RowWrite, keys []store.Lease) ([]bool, error) {
	giveUp := time.Now().Add(2 * time.Second)
	if last := c.leases.lastDeadline(keys); last.After(giveUp) {
		giveUp = last
	}
	for attempt := 0; ; attempt++ {
		// Finalize must not be cut short by shutdown: a publish that succeeded
		// and is not recorded would be delivered again.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		held, err := c.finalizeOnce(ctx, writes)
		if err == nil && attempt > 0 && c.d.shards == nil {
			// Under shard leases a write whose reply was lost reads as
			// not made (lease_lost); confirming it is still to come.
			err = c.confirmWritten(ctx, writes, held)
		}
		cancel()
		c.d.stats.finalizes.Add(1)
		if err == nil || time.Now().After(giveUp) {
			return held, err
		}
		c.d.hook.OnFinalize(FinalizeEvent{Rows: len(writes), Duration: time.Since(start), Err: err, Retrying: true})
		c.d.log.Error("finalize failed; retrying", slog.Any("error", err), slog.Int("rows", len(writes)), slog.Int("try", attempt+1))
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
	written, err := c.d.store.FinalizeWritten(ctx, c.d.pool, unheld)
	if err != nil {
		return err
	}
	for k, i := range at {
		held[i] = written[k]
	}
	return nil
}

// finalizeOnce runs one finalize statement. In failpoint builds with
// "in-finalize" armed it runs inside an explicit transaction and hits the
// failpoint before COMMIT, so the suite can crash a worker mid-finalize.
func (c *completer) finalizeOnce(ctx context.Context, writes []store.RowWrite) ([]bool, error) {
	d := c.d
	if d.shards != nil {
		return d.store.FinalizeShards(ctx, d.pool, d.cfg.Owner, writes)
	}
	if !failpoint.Enabled || !failpoint.Armed("in-finalize") {
		return d.store.Finalize(ctx, d.pool, d.cfg.Owner, writes)
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	held, err := d.store.Finalize(ctx, tx, d.cfg.Owner, writes)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("in-finalize")
	return held, tx.Commit(ctx)
}
