package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// verdict is a worker's answer for one claimed row: its outcome, the fenced
// write that records it, and what the publish returned.
type verdict struct {
	claim   *claimed
	outcome Outcome
	write   store.RowWrite
	err     error
	// publishDur is how long Publish took; zero if it was not called.
	publishDur time.Duration
	// ended is when a publish that did not deliver ended, on the
	// database's clock (for the attempt history); zero otherwise.
	ended time.Time
}

// worker publishes claimed rows and returns one verdict for each.
type worker struct {
	cfg     publishConfig
	breaker *breaker
	sizer   *claimSizer
	leases  *lease.Registry
	// chains, when set, hand the worker the next message of an aggregate
	// it just delivered (see chains).
	chains *chains
	// publish calls the sink; observe tells the breaker what it
	// answered; classify turns the answer into a verdict.
	publish  func(context.Context, *Message) error
	observe  func(*Message, error)
	classify func(*claimed, error) verdict
	// flow, when set, admits each publish to its destination's limits.
	flow *flowControl
	// pauses hold back the messages of paused destinations.
	pauses *pauseGate
}

// run publishes claims until in is closed. Once ctx is done, claims not yet
// started are released instead of published.
func (w *worker) run(ctx context.Context, in <-chan *claimed, out chan<- verdict) {
	for c := range in {
		for c != nil {
			v := w.process(ctx, c)
			out <- v
			c = w.follow(c, &v, out)
		}
		if w.chains != nil {
			w.chains.finished()
		}
	}
}

// behindUndelivered is why a message queued behind one of its aggregate
// that was not delivered is released.
const behindUndelivered = "released unpublished: an earlier message of its aggregate was not delivered"

// follow is the message of c's aggregate the worker publishes next, when
// the mode chains them; the queued ones are released when c was not
// delivered.
func (w *worker) follow(c *claimed, v *verdict, out chan<- verdict) *claimed {
	if w.chains == nil {
		return nil
	}
	next, released := w.chains.next(c, v.outcome == OutcomeDone)
	for _, r := range released {
		out <- release(r, behindUndelivered)
	}
	return next
}

// process publishes one claim, or releases it unpublished when it cannot be
// given a useful publish.
func (w *worker) process(ctx context.Context, c *claimed) verdict {
	if ctx.Err() != nil {
		return release(c, "released at shutdown")
	}
	if c.dropped {
		return release(c, behindUndelivered)
	}
	if held, why := w.pauses.holds(&c.msg); held {
		return pausedBack(c, why)
	}
	if w.breaker.paused() {
		return release(c, "released unpublished: sink unavailable")
	}
	remaining := w.leases.Remaining(c.entry)
	if remaining < w.cfg.startWindow {
		// Waited in its batch until too little of its lease is left for a
		// useful publish: the lease cap is not the message's fault, so
		// the attempt is refunded rather than spent on a cut-short try.
		return release(c, "released unpublished: lease too close to expiry")
	}
	timeout, capped := w.cfg.timeout, false
	if w.cfg.renewEvery == 0 && remaining < timeout {
		// Without heartbeats the lease cannot grow: the publish must end
		// inside it.
		timeout, capped = remaining, true
	}
	var admitted func(time.Duration)
	if w.flow != nil {
		// A wait for a token may take what the lease can spare beyond a
		// useful publish.
		spare := remaining - w.cfg.startWindow
		if w.cfg.renewEvery == 0 {
			spare = remaining - max(timeout, w.cfg.startWindow)
		}
		done, hold, why := w.flow.admitWithin(ctx, &c.msg, max(spare, 0))
		if done == nil {
			return holdBack(c, hold, why)
		}
		admitted = done
	}
	pctx, took, err := w.publishTimed(ctx, c, timeout)
	if admitted != nil {
		admitted(took)
	}
	w.sizer.observe(took)
	w.observe(&c.msg, err)
	if capped && err != nil && errors.Is(pctx.Err(), context.DeadlineExceeded) && transient(err) {
		// Timed out at the lease's end, not at PublishTimeout: the
		// message's attempt is not spent on the lease running short.
		v := release(c, "released: publish cut short by the lease")
		v.publishDur = took
		return v
	}
	v := w.classify(c, err)
	v.publishDur = took
	if err != nil {
		v.ended = c.dbTime()
	}
	return v
}

// publishTimed runs one publish bounded by timeout and reports it to the
// lease registry, so heartbeats extend its lease and may cancel it. In-flight
// publishes finish on shutdown: their context is not cancelled with ctx, only
// bounded by the timeout, or by a heartbeat that finds the lease lost. It
// returns the publish's (ended) context, its duration and its error.
func (w *worker) publishTimed(ctx context.Context, c *claimed, timeout time.Duration) (context.Context, time.Duration, error) {
	pctx := newPublishCtx(ctx, timeout)
	w.leases.Begin(c.entry, pctx.cancel)
	endSection := failpoint.During("mid-publish")
	err := w.publish(pctx, &c.msg)
	endSection()
	failpoint.Hit("after-publish")
	took := w.leases.End(c.entry)
	pctx.end()
	if err != nil && pctx.timedOut() && !errors.Is(err, context.DeadlineExceeded) && errors.Is(err, context.Canceled) {
		err = deadlineError{err}
	}
	return pctx, took, err
}

// publishConfig is what a worker reads of the dispatcher's config and its
// lease mode.
type publishConfig struct {
	timeout     time.Duration // PublishTimeout
	startWindow time.Duration // see startWindow
	// renewEvery is how often the lease mode extends the leases of rows
	// in flight (zero: never, so a publish must end inside its lease).
	renewEvery time.Duration
}

func (c *Config) publishConfig(renewEvery time.Duration) publishConfig {
	return publishConfig{timeout: c.PublishTimeout, startWindow: startWindow(c, renewEvery), renewEvery: renewEvery}
}

// startWindow is the least lease a row must have left for its publish to
// start. Without heartbeats the publish must end inside the lease: a
// quarter of the lease, or PublishTimeout if shorter, gives a healthy sink
// a fair try. With heartbeats the lease must last until the next beat
// extends it: one renewal interval (at most a third of the lease).
func startWindow(c *Config, renewEvery time.Duration) time.Duration {
	if renewEvery > 0 {
		return renewEvery
	}
	return min(c.PublishTimeout, c.Lease/4)
}

// transient reports whether err would be retried: not permanent, not a
// defer or an unavailable sink (which say something the sink knows), not a
// panic.
func transient(err error) bool {
	var p *panicError
	return !IsPermanent(err) && !IsDefer(err) && !IsUnavailable(err) && !errors.As(err, &p)
}

// release returns c to pending unpublished, its attempt refunded.
// holdBack is release due again after hold: a message its destination
// has no budget for now (flowControl). Neither failed nor charged an
// attempt, and its last error is kept.
func holdBack(c *claimed, hold time.Duration, why string) verdict {
	v := release(c, why)
	v.write.Delay = hold
	return v
}

func release(c *claimed, reason string) verdict {
	return verdict{claim: c, outcome: OutcomeReleased, write: store.RowWrite{
		ID: c.msg.ID, LeaseVersion: c.msg.FencingToken, Born: c.born, Status: store.StatusPending, Refund: true,
	}, err: errors.New(reason)}
}
