package outbox

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/store"
)

// complete finalizes results in batches: whatever has accumulated while the
// previous statement ran goes in the next one, so batches grow with load and
// an idle system finalizes at once.
func (d *Dispatcher) complete(results <-chan result, inflight *atomic.Int64) {
	maxBatch := 2*d.cfg.BatchSize + d.cfg.Workers
	batch := make([]result, 0, maxBatch)
	for r := range results {
		batch = append(batch[:0], r)
	gather:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-results:
				if !ok {
					break gather
				}
				batch = append(batch, r)
			default:
				break gather
			}
		}
		d.finalize(batch)
		inflight.Add(-int64(len(batch)))
		select {
		case d.freed <- struct{}{}:
		default:
		}
	}
}

func (d *Dispatcher) finalize(batch []result) {
	outcomes := make([]store.RowWrite, len(batch))
	for i := range batch {
		outcomes[i] = batch[i].outcome
	}
	start := time.Now()
	defer d.forget(batch)
	held, err := d.writeOutcomes(batch, outcomes)
	if err != nil {
		// The rows stay processing; their leases expire and they are
		// claimed again. Delivery is at least once, never lost.
		d.log.Error("giving up on finalize; rows will be re-claimed after their lease", slog.Int("rows", len(batch)))
		d.hook.OnFinalize(FinalizeEvent{Rows: len(batch), Duration: time.Since(start), Err: err})
		return
	}
	lost := 0
	for _, h := range held {
		if !h {
			lost++
		}
	}
	d.hook.OnFinalize(FinalizeEvent{Rows: len(batch), LeaseLost: lost, Duration: time.Since(start)})
	for i := range batch {
		d.settle(&batch[i], held[i])
	}
}

// writeOutcomes runs the finalize statement, retrying while the batch's
// leases may still hold (a database restart or failover takes seconds):
// every try is fenced, so a late success is still correct, and each give-up
// means re-deliveries. It returns, per outcome, whether it was written.
func (d *Dispatcher) writeOutcomes(batch []result, outcomes []store.RowWrite) ([]bool, error) {
	giveUp := time.Now().Add(2 * time.Second)
	for i := range batch {
		if dl := time.Now().Add(batch[i].job.untilDeadline()); dl.After(giveUp) {
			giveUp = dl
		}
	}
	for attempt := 0; ; attempt++ {
		// Finalize must not be cut short by shutdown: a publish that succeeded
		// and is not recorded would be delivered again.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		held, err := d.finalizeOnce(ctx, outcomes)
		if err == nil && attempt > 0 {
			err = d.confirmWritten(ctx, outcomes, held)
		}
		cancel()
		d.stats.finalizes.Add(1)
		if err == nil || time.Now().After(giveUp) {
			return held, err
		}
		d.log.Error("finalize failed; retrying", slog.Any("error", err), slog.Int("rows", len(batch)), slog.Int("try", attempt+1))
		time.Sleep(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second))
	}
}

// confirmWritten marks held the outcomes an earlier try already wrote. A
// try that failed may have failed after its commit (the reply lost with
// the connection), and the retry then finds those rows no longer
// processing: without this they would be reported as lost leases.
func (d *Dispatcher) confirmWritten(ctx context.Context, outcomes []store.RowWrite, held []bool) error {
	var unheld []store.RowWrite
	var at []int
	for i, h := range held {
		if !h {
			unheld, at = append(unheld, outcomes[i]), append(at, i)
		}
	}
	if len(unheld) == 0 {
		return nil
	}
	written, err := d.store.FinalizeWritten(ctx, d.pool, unheld)
	if err != nil {
		return err
	}
	for k, i := range at {
		held[i] = written[k]
	}
	return nil
}

// settle reports one message's outcome: the hook, the counters and a log
// line for what an operator should see.
func (d *Dispatcher) settle(r *result, held bool) {
	m := &r.job.msg
	ev := SettleEvent{
		Message: m, Outcome: r.kind.outcome(), PublishDuration: r.job.publishDur, Err: r.err,
		Lag: r.job.dbTime().Sub(m.CreatedAt),
	}
	if !held {
		ev.Outcome = OutcomeLeaseLost
	}
	d.hook.OnSettle(ev)
	if !held {
		d.stats.leaseLost.Add(1)
		d.log.Warn("lost lease: finalize fenced off",
			slog.Int64("outbox_id", m.ID), slog.Int64("lease_version", m.FencingToken),
			slog.String("outcome", r.kind.String()))
		return
	}
	d.stats.count(r.kind)
	switch r.kind {
	case kindDead:
		d.log.Warn("message dead", slog.Int64("outbox_id", m.ID),
			slog.Int64("lease_version", m.FencingToken), slog.Int("attempt", m.Attempt),
			slog.String("error", r.outcome.Error))
	case kindRetried:
		d.log.Info("message will be retried", slog.Int64("outbox_id", m.ID),
			slog.Int64("lease_version", m.FencingToken), slog.Int("attempt", m.Attempt),
			slog.Duration("delay", r.outcome.Delay), slog.String("error", r.outcome.Error))
	case kindDeferred:
		d.log.Debug("message deferred", slog.Int64("outbox_id", m.ID),
			slog.Int64("lease_version", m.FencingToken), slog.Duration("delay", r.outcome.Delay))
	}
}

// finalizeOnce runs one finalize statement. In failpoint builds with
// "in-finalize" armed it runs inside an explicit transaction and hits the
// failpoint before COMMIT, so the suite can crash a worker mid-finalize.
func (d *Dispatcher) finalizeOnce(ctx context.Context, outcomes []store.RowWrite) ([]bool, error) {
	if !failpoint.Enabled || !failpoint.Armed("in-finalize") {
		return d.store.Finalize(ctx, d.pool, d.cfg.Owner, outcomes)
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	held, err := d.store.Finalize(ctx, tx, d.cfg.Owner, outcomes)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("in-finalize")
	return held, tx.Commit(ctx)
}
