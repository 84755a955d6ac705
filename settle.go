package outbox

import (
	"log/slog"

	"github.com/outboxd/outbox/internal/store"
)

// settle reports one message's outcome once its fenced write was tried: the
// hook, the counters and a log line for what an operator should see. A
// write that did not hold is a lost lease, whatever the verdict was.
func (d *Dispatcher) settle(v *verdict, held bool) {
	m := &v.claim.msg
	outcome := v.outcome
	if !held {
		outcome = OutcomeLeaseLost
	}
	// Counted first: a hook that reads Stats sees its own event counted.
	d.stats.count(outcome)
	d.hook.OnSettle(SettleEvent{
		Message: m, Outcome: outcome, PublishDuration: v.publishDur, Err: v.err,
		Lag: v.claim.dbTime().Sub(m.CreatedAt),
	})
	switch outcome {
	case OutcomeReleased:
		d.breaker.released()
		if v.write.Error == store.PausedError {
			d.pauses.settled(m)
			if d.pauses.wake.Load() {
				d.signal()
			}
		}
		if v.write.Delay > 0 {
			d.dues.add(d.clock.Now().Add(v.write.Delay))
		}
	case OutcomeLeaseLost:
		d.log.Warn("lost lease: finalize fenced off",
			slog.Int64("outbox_id", m.ID), slog.Int64("lease_version", m.FencingToken),
			slog.String("outcome", string(v.outcome)))
	case OutcomeDead:
		d.log.Warn("message dead", slog.Int64("outbox_id", m.ID),
			slog.Int64("lease_version", m.FencingToken), slog.Int("attempt", m.Attempt),
			slog.String("error", v.write.Error))
	case OutcomeRetry:
		d.dues.add(d.clock.Now().Add(v.write.Delay))
		d.log.Info("message will be retried", slog.Int64("outbox_id", m.ID),
			slog.Int64("lease_version", m.FencingToken), slog.Int("attempt", m.Attempt),
			slog.Duration("delay", v.write.Delay), slog.String("error", v.write.Error))
	case OutcomeDefer:
		d.dues.add(d.clock.Now().Add(v.write.Delay))
		d.log.Debug("message deferred", slog.Int64("outbox_id", m.ID),
			slog.Int64("lease_version", m.FencingToken), slog.Duration("delay", v.write.Delay))
	}
}
