package outbox

import (
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Bounds of the pause after a sink reports itself unavailable: the first
// pause lasts SinkPauseMin, each probe refused again doubles it, up to
// SinkPauseMax.
const (
	SinkPauseMin = time.Second
	SinkPauseMax = time.Minute
)

// breaker pauses the whole sink while it reports [Unavailable] (a
// credential or certificate problem concerns every message, not one): no
// claims, unstarted rows released, then one row claimed as a probe after
// a backoff. Any answer of the sink other than Unavailable closes it.
//
// The probe needs a row to claim: a refused message is due again just
// before the probe (retryIn), so it can be the probe even when every
// pending message was refused. Parking refused messages for longer left
// the probe nothing to claim, and a healed sink idle for that long.
type breaker struct {
	// now is the clock (time.Now when nil; tests set their own).
	now func() time.Time

	mu       sync.Mutex
	state    breakerState
	until    time.Time     // open: when to probe
	pause    time.Duration // the current pause
	probeOut bool          // probing: the probe row is claimed
	// probeAt is when the probe went out, for a breaker that holds back
	// messages rather than claims (hold).
	probeAt time.Time
}

func (b *breaker) clock() time.Time {
	if b.now == nil {
		return time.Now()
	}
	return b.now()
}

type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerProbing
)

// trip opens the breaker until the next probe, at least after (what the
// sink asked for) from now; tripped is false when it was already open (a
// publish that started before the pause), so each pause is reported once.
func (b *breaker) trip(after time.Duration) (wait time.Duration, tripped bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerOpen:
		return 0, false
	case breakerProbing:
		b.pause = min(2*b.pause, SinkPauseMax)
	default:
		b.pause = SinkPauseMin
	}
	wait = max(b.pause, after)
	b.state, b.until, b.probeOut = breakerOpen, b.clock().Add(wait), false
	return wait, true
}

// retryIn is how long a message the sink refused waits: until just before
// the probe, so the probe may claim it (the finalize that writes the delay
// comes after the trip, and must not make it late); 0 when the breaker is
// closed.
func (b *breaker) retryIn() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != breakerOpen {
		return 0
	}
	wait := b.until.Sub(b.clock())
	return max(wait-min(wait/10, 250*time.Millisecond), 0)
}

// answered closes the breaker; resumed reports that it was not closed.
func (b *breaker) answered() (resumed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerClosed {
		return false
	}
	b.state, b.probeOut = breakerClosed, false
	return true
}

// paused reports whether unstarted rows are to be released.
func (b *breaker) paused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == breakerOpen
}

// closed reports whether the breaker is closed (neither open nor
// probing).
func (b *breaker) closed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == breakerClosed
}

// hold is gate for a breaker that holds back messages one by one (a
// destination's, flowbreaker.go) rather than claims: how long the next
// message is to be handed back for. Open, until the probe; the first
// message after that is the probe; while it is out, a while (at most
// probeHold), unless it has been out for hungAfter (released unpublished,
// or hung): then the next message is the probe.
func (b *breaker) hold(hungAfter time.Duration) (hold time.Duration, held bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	switch b.state {
	case breakerOpen:
		if now.Before(b.until) {
			return b.until.Sub(now), true
		}
		b.state, b.probeAt = breakerProbing, now
	case breakerProbing:
		if now.Sub(b.probeAt) < hungAfter {
			return min(b.pause/2, probeHold), true
		}
		b.probeAt = now
	}
	return 0, false
}

// gate says how many rows the next claim may take (-1: no limit) or how
// long to wait first. A probe that ended without an answer (released, or
// nothing to claim) lets the next claim probe again.
func (b *breaker) gate(inflight int64) (limit int, wait time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerOpen:
		if wait := b.until.Sub(b.clock()); wait > 0 {
			return 0, wait
		}
		b.state = breakerProbing
	case breakerClosed:
		return -1, 0
	}
	if b.probeOut && inflight == 0 {
		b.probeOut = false
	}
	if b.probeOut {
		return 0, 0
	}
	return 1, 0
}

// released records a row released unpublished. If it was the probe, the
// probe ended without an answer, and the next claim may probe again; the
// other way to tell, nothing left in flight, never comes while a publish
// hangs holding its slot. (Another row released meanwhile ends the wait
// as well: at worst two probes go out.)
func (b *breaker) released() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerProbing {
		b.probeOut = false
	}
}

// claimed records that a probing claim took rows.
func (b *breaker) claimed(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == breakerProbing && n > 0 {
		b.probeOut = true
	}
}

// observeSink feeds a publish's result to the breaker, reporting a pause
// and a resumption once each.
func (d *Dispatcher) observeSink(err error) {
	if unavailable := (*UnavailableError)(nil); errors.As(err, &unavailable) {
		pause, tripped := d.breaker.trip(d.retryFloor(unavailable.After))
		if !tripped {
			return
		}
		d.stats.sinkPauses.Add(1)
		d.log.Error("sink unavailable; pausing claims and releasing unstarted rows",
			slog.Any("error", err), slog.Duration("probe_in", pause))
		d.hook.OnSinkPause(SinkPauseEvent{Paused: true, Pause: pause, Err: err})
		return
	}
	if d.breaker.answered() {
		d.log.Info("sink answered again; resuming claims")
		d.hook.OnSinkPause(SinkPauseEvent{Paused: false})
	}
}
