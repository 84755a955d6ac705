package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// classify turns a publish result into the fenced write that records it.
//
//   - nil: done.
//   - Defer: pending after its delay, attempt refunded; dead once the message
//     is older than DeferMaxAge.
//   - Unavailable (a condition of the sink's connection): pending, attempt
//     refunded, due again just before the paused sink's probe.
//   - Permanent, or a sink panic: dead at once.
//   - Retryable, a publish timeout, or an unclassified error: pending after a
//     full-jitter backoff; dead when this was the last attempt. Unclassified
//     errors are logged at error level so a sink's missing case surfaces.
func (d *Dispatcher) classify(c *claimed, err error) verdict {
	m := &c.msg
	r := verdict{claim: c, err: err, write: store.RowWrite{ID: m.ID, LeaseVersion: m.FencingToken, Born: c.born}}
	if err == nil {
		r.outcome, r.write.Status = OutcomeDone, store.StatusDone
		return r
	}
	msg := err.Error()
	var (
		deferErr *DeferError
		permErr  *PermanentError
		retryErr *RetryableError
		panicErr *panicError
		unavErr  *UnavailableError
	)
	switch {
	case errors.As(err, &deferErr):
		delay, ok := d.deferDelay(c, deferErr.Delay)
		if !ok {
			return d.dead(r, "defer max age exceeded: "+msg)
		}
		r.outcome = OutcomeDefer
		r.write.Status, r.write.Delay, r.write.Refund, r.write.Error = store.StatusPending, delay, true, msg
		return r
	case errors.As(err, &unavErr):
		// A condition of the connection, not of the message: no attempt spent.
		r.outcome = OutcomeDefer
		r.write.Status, r.write.Refund, r.write.Error = store.StatusPending, true, msg
		r.write.Delay = d.unavailableRetryIn(m)
		return r
	case errors.As(err, &permErr), errors.As(err, &panicErr):
		return d.dead(r, msg)
	}
	var floor time.Duration
	switch {
	case errors.As(err, &retryErr):
		floor = d.retryFloor(retryErr.After)
	case errors.Is(err, context.DeadlineExceeded):
		msg = "publish timed out: " + msg
	case errors.Is(err, context.Canceled):
		// Cancelled by a heartbeat that found the lease lost; the fenced
		// write that follows will be refused.
		msg = "publish cancelled: " + msg
	default:
		msg = "unclassified: " + msg
		d.log.Error("sink returned an unclassified error; treating it as retryable",
			slog.Int64("outbox_id", m.ID), slog.Int64("lease_version", m.FencingToken),
			slog.Int("attempt", m.Attempt), slog.Any("error", err))
	}
	if m.Attempt >= d.cfg.MaxAttempts {
		return d.dead(r, "retries exhausted: "+msg)
	}
	r.outcome = OutcomeRetry
	r.write.Status = store.StatusPending
	r.write.Delay = FullJitter(m.Attempt, d.cfg.RetryBase, d.cfg.RetryCap, floor)
	r.write.Error = msg
	return r
}

func (d *Dispatcher) dead(r verdict, msg string) verdict {
	r.outcome = OutcomeDead
	r.write.Status, r.write.Error = store.StatusDead, msg
	return r
}

// deferDelay is how long a defer of c by delay (zero: DeferDelay) postpones
// it: no further than DeferMaxAge still allows, measured from created_at on
// the database's clock. ok is false when the message is already past it.
func (d *Dispatcher) deferDelay(c *claimed, delay time.Duration) (_ time.Duration, ok bool) {
	if delay == 0 {
		delay = d.cfg.DeferDelay
	}
	if d.cfg.DeferMaxAge < 0 {
		return delay, true
	}
	left := c.msg.CreatedAt.Add(d.cfg.DeferMaxAge).Sub(c.dbTime())
	if left <= 0 {
		return 0, false
	}
	return min(delay, left), true
}

// retryFloor cuts a sink's requested least delay to [RetryFloorMax], or to
// RetryCap when that is longer: a sink asking for years must not park a
// message for years.
func (d *Dispatcher) retryFloor(after time.Duration) time.Duration {
	return min(after, max(RetryFloorMax, d.cfg.RetryCap))
}
