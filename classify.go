package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

type outcomeKind uint8

const (
	kindDone outcomeKind = iota
	kindRetried
	kindDeferred
	kindDead
	kindReleased
)

func (k outcomeKind) String() string {
	return [...]string{"done", "retry", "defer", "dead", "released"}[k]
}

// classify turns a publish result into the fenced write that records it.
//
//   - nil: done.
//   - Defer: pending after its delay, attempt refunded; dead once the message
//     is older than DeferMaxAge.
//   - Unavailable (a condition of the sink's connection): pending after at
//     least UnavailableDelayDefault, attempt refunded.
//   - Permanent, or a sink panic: dead at once.
//   - Retryable, a publish timeout, or an unclassified error: pending after a
//     full-jitter backoff; dead when this was the last attempt. Unclassified
//     errors are logged at error level so a sink's missing case surfaces.
func (d *Dispatcher) classify(j *job, err error) result {
	m := &j.msg
	r := result{job: j, err: err, outcome: store.RowWrite{ID: m.ID, LeaseVersion: m.FencingToken}}
	if err == nil {
		r.kind, r.outcome.Status = kindDone, store.StatusDone
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
		delay, ok := d.deferDelay(j, deferErr.Delay)
		if !ok {
			return d.dead(r, "defer max age exceeded: "+msg)
		}
		r.kind = kindDeferred
		r.outcome.Status, r.outcome.Delay, r.outcome.Refund, r.outcome.Error = store.StatusPending, delay, true, msg
		return r
	case errors.As(err, &unavErr):
		// A condition of the connection, not of the message: no attempt spent.
		r.kind = kindDeferred
		r.outcome.Status, r.outcome.Refund, r.outcome.Error = store.StatusPending, true, msg
		r.outcome.Delay = max(d.retryFloor(unavErr.After), UnavailableDelayDefault)
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
	r.kind = kindRetried
	r.outcome.Status = store.StatusPending
	r.outcome.Delay = FullJitter(m.Attempt, d.cfg.RetryBase, d.cfg.RetryCap, floor)
	r.outcome.Error = msg
	return r
}

func (d *Dispatcher) dead(r result, msg string) result {
	r.kind = kindDead
	r.outcome.Status, r.outcome.Error = store.StatusDead, msg
	return r
}

// deferDelay is how long a defer of j by delay (zero: DeferDelay) postpones
// it: no further than DeferMaxAge still allows, measured from created_at on
// the database's clock. ok is false when the message is already past it.
func (d *Dispatcher) deferDelay(j *job, delay time.Duration) (_ time.Duration, ok bool) {
	if delay == 0 {
		delay = d.cfg.DeferDelay
	}
	if d.cfg.DeferMaxAge < 0 {
		return delay, true
	}
	left := j.msg.CreatedAt.Add(d.cfg.DeferMaxAge).Sub(j.dbTime())
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
