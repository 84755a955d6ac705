package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/store"
)

// work publishes jobs until jobs is closed. Once ctx is done, jobs not yet
// started are released instead of published.
func (d *Dispatcher) work(ctx context.Context, jobs <-chan *job, results chan<- result) {
	for j := range jobs {
		results <- d.process(ctx, j)
	}
}

// process publishes one job, or releases it unpublished when it cannot be
// given a useful publish, and returns the outcome to write.
func (d *Dispatcher) process(ctx context.Context, j *job) result {
	if ctx.Err() != nil {
		return d.release(j, "released at shutdown")
	}
	if d.breaker.paused() {
		return d.release(j, "released unpublished: sink unavailable")
	}
	remaining := j.untilDeadline()
	if remaining < d.startWindow() {
		// Waited in its batch until too little of its lease is left for a
		// useful publish: the lease cap is not the message's fault, so
		// the attempt is refunded rather than spent on a cut-short try.
		return d.release(j, "released unpublished: lease too close to expiry")
	}
	timeout, capped := d.cfg.PublishTimeout, false
	if d.cfg.HeartbeatInterval == 0 && remaining < timeout {
		// Without heartbeats the lease cannot grow: the publish must end
		// inside it.
		timeout, capped = remaining, true
	}
	// In-flight publishes finish on shutdown: their context is not
	// cancelled with ctx, only bounded by the publish timeout, or by a
	// heartbeat that finds the lease lost.
	cctx, cancelCause := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelCause(nil)
	pctx, cancel := context.WithTimeout(cctx, timeout)
	defer cancel()
	d.startFlight(j, cancelCause)
	endSection := failpoint.During("mid-publish")
	err := d.publish(pctx, &j.msg)
	endSection()
	failpoint.Hit("after-publish")
	j.publishDur = time.Since(time.Unix(0, j.started.Load()))
	j.phase.Store(phasePublished)
	d.sizer.observe(j.publishDur)
	d.observeSink(err)
	if capped && err != nil && errors.Is(pctx.Err(), context.DeadlineExceeded) && transient(err) {
		// Timed out at the lease's end, not at PublishTimeout: the
		// message's attempt is not spent on the lease running short.
		return d.release(j, "released: publish cut short by the lease")
	}
	return d.classify(j, err)
}

// startWindow is the least lease a row must have left for its publish to
// start. Without heartbeats the publish must end inside the lease: a
// quarter of the lease, or PublishTimeout if shorter, gives a healthy sink
// a fair try. With heartbeats the lease must last until the next beat
// extends it: one HeartbeatInterval (at most a third of the lease).
func (d *Dispatcher) startWindow() time.Duration {
	if d.cfg.HeartbeatInterval > 0 {
		return d.cfg.HeartbeatInterval
	}
	return min(d.cfg.PublishTimeout, d.cfg.Lease/4)
}

// startFlight records that j's publish begins: from now on heartbeats
// extend its lease and may cancel it.
func (d *Dispatcher) startFlight(j *job, cancel context.CancelCauseFunc) {
	j.started.Store(time.Now().UnixNano())
	j.phase.Store(phasePublishing)
	d.flightsMu.Lock()
	j.cancel = cancel
	if d.cfg.HeartbeatInterval > 0 {
		d.flights[j.lease()] = j
	}
	d.flightsMu.Unlock()
}

// transient reports whether err would be retried: not permanent, not a
// defer or an unavailable sink (which say something the sink knows), not a
// panic.
func transient(err error) bool {
	var p *panicError
	return !IsPermanent(err) && !IsDefer(err) && !IsUnavailable(err) && !errors.As(err, &p)
}

func (d *Dispatcher) release(j *job, reason string) result {
	return result{job: j, kind: kindReleased, outcome: store.RowWrite{
		ID: j.msg.ID, LeaseVersion: j.msg.FencingToken, Status: store.StatusPending, Refund: true,
	}, err: errors.New(reason)}
}
