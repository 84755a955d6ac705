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
	// history records the attempts that did not deliver (nil: off).
	history *history
	engine

	batch  []verdict
	writes []store.RowWrite
	keys   []store.Lease

	// batched is the mode when it writes a read batch at a time
	// (snapshot cursors); waiting then holds the verdicts it has not yet
	// decided, by lease.
	batched lease.Batched
	waiting map[store.Lease]verdict
	// settled, held, done and doneKeys are finalizeBatched's, reused.
	settled  []verdict
	held     []bool
	done     []store.RowWrite
	doneKeys []store.Lease
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

// newBatchedCompleter is the completer of a batched mode (see
// finalizeBatched).
func newBatchedCompleter(d *Dispatcher, mode lease.Batched, s *slots, leases *lease.Registry, maxBatch int) *completer {
	c := newCompleter(d, mode, s, leases, maxBatch)
	c.batched, c.waiting = mode, make(map[store.Lease]verdict, s.size)
	return c
}

// run finalizes verdicts until in is closed: whatever has accumulated
// since the last write goes in the next. A batched mode also kicks it when
// batches became complete without a verdict, and is written once more at
// the end, for those.
func (c *completer) run(in <-chan verdict) {
	var kick <-chan struct{} // nil, never ready, unless batched
	if c.batched != nil {
		kick = c.batched.Kick()
	}
	for {
		select {
		case v, ok := <-in:
			if !ok {
				if c.batched != nil {
					c.finalizeBatched(nil)
				}
				return
			}
			c.gather(v, in)
			if c.batched != nil {
				c.finalizeBatched(c.batch)
				continue
			}
			c.finalize(c.batch)
			c.slots.give(len(c.batch))
		case <-kick:
			c.finalizeBatched(nil)
		}
	}
}

// gather fills c.batch with v and the verdicts waiting in in, up to its
// capacity.
func (c *completer) gather(v verdict, in <-chan verdict) {
	c.batch = append(c.batch[:0], v)
	for len(c.batch) < cap(c.batch) {
		select {
		case v, ok := <-in:
			if !ok {
				return
			}
			c.batch = append(c.batch, v)
		default:
			return
		}
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
	c.history.record(batch, held)
}

// write runs the finalize statement, retrying while the batch's leases may
// still hold (see retry). It returns, per write, whether it held.
func (c *completer) write(writes []store.RowWrite, keys []store.Lease) ([]bool, error) {
	var held []bool
	err := c.retry(len(writes), func() []store.Lease { return keys }, func(ctx context.Context, attempt int) (bool, error) {
		var err error
		held, err = c.mode.Finalize(ctx, writes)
		if err == nil && attempt > 0 {
			err = c.confirmWritten(ctx, writes, held)
		}
		return true, err
	})
	return held, err
}

// retry runs try, and again after a failure while the leases of keys may
// still hold (a database restart or failover takes seconds; at least two
// seconds from the first try): every try is fenced, so a late success is
// still correct, and each give-up means re-deliveries. keys is asked for
// only once a try failed. try reports whether it ran a statement. A write
// must not be cut short by shutdown (a publish that succeeded and is not
// recorded would be delivered again), so its context is not the run's.
func (c *completer) retry(rows int, keys func() []store.Lease, try func(ctx context.Context, attempt int) (bool, error)) error {
	first := c.clock.Now()
	var giveUp time.Time
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := c.clock.Now()
		ran, err := try(ctx, attempt)
		cancel()
		if ran || err != nil {
			c.stats.finalizes.Add(1)
		}
		if err == nil {
			return nil
		}
		if attempt == 0 {
			giveUp = first.Add(2 * time.Second)
			if last := c.leases.LastDeadline(keys()); last.After(giveUp) {
				giveUp = last
			}
		}
		if c.clock.Now().After(giveUp) {
			return err
		}
		c.hook.OnFinalize(FinalizeEvent{Rows: rows, Duration: c.clock.Since(start), Err: err, Retrying: true})
		c.log.Error("finalize failed; retrying", slog.Any("error", err), slog.Int("rows", rows), slog.Int("try", attempt+1))
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

// finalizeBatched hands a batch of verdicts to a batched mode and settles
// those it decided, these or earlier ones: a verdict is decided once the
// last of the read batch it belongs to came and the batch was written.
// Until then it keeps its slot. When the write gives up, the mode gives
// the batches up (their messages are delivered again) and they are
// settled as lost.
func (c *completer) finalizeBatched(batch []verdict) {
	c.writes, c.keys = c.writes[:0], c.keys[:0]
	for i := range batch {
		key := batch[i].claim.lease()
		c.waiting[key] = batch[i]
		c.writes = append(c.writes, batch[i].write)
	}
	start := c.clock.Now()
	decided, err := c.decide(c.writes)
	if err != nil {
		c.log.Error("giving up on finalize; the messages will be delivered again", slog.Int("rows", len(c.waiting)))
		c.hook.OnFinalize(FinalizeEvent{Rows: len(batch), Duration: c.clock.Since(start), Err: err})
		decided = c.batched.Abandon()
	}
	if len(decided) == 0 {
		return
	}
	settled, held, writes, keys := c.settled[:0], c.held[:0], c.done[:0], c.doneKeys[:0]
	defer func() {
		clear(settled) // let the claims go
		c.settled, c.held, c.done, c.doneKeys = settled[:0], held[:0], writes[:0], keys[:0]
	}()
	lost := 0
	for _, d := range decided {
		key := store.Lease{ID: d.ID, Version: d.Token}
		v, ok := c.waiting[key]
		if !ok {
			continue
		}
		delete(c.waiting, key)
		settled, held = append(settled, v), append(held, d.Held)
		writes, keys = append(writes, v.write), append(keys, key)
		if !d.Held {
			lost++
		}
	}
	c.leases.Forget(keys)
	c.mode.Settled(writes)
	if c.chains != nil {
		c.chains.settled(settled, held)
	}
	if err == nil {
		c.hook.OnFinalize(FinalizeEvent{Rows: len(settled), LeaseLost: lost, Duration: c.clock.Since(start)})
	}
	for i := range settled {
		c.settle(&settled[i], held[i])
	}
	c.history.record(settled, held)
	c.slots.give(len(settled))
}

// decide runs the mode's Decide, retrying as write does; the keys are
// those of every verdict waiting.
func (c *completer) decide(writes []store.RowWrite) ([]lease.Decision, error) {
	var decided []lease.Decision
	waiting := func() []store.Lease {
		c.keys = c.keys[:0]
		for key := range c.waiting {
			c.keys = append(c.keys, key)
		}
		return c.keys
	}
	err := c.retry(len(writes), waiting, func(ctx context.Context, _ int) (bool, error) {
		var err error
		decided, err = c.batched.Decide(ctx, writes)
		return len(decided) > 0, err
	})
	return decided, err
}
