package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// A table relayed to several destinations (a router with routes) keeps a
// breaker per destination: a route's sink that says it is unavailable
// ([Unavailable]) holds back its own messages, handed back pending with
// no attempt spent until a probe, while the other destinations go on.
// With one destination the dispatcher's breaker pauses the claims instead
// (breaker.go).

// splitBreaker reports whether f names destinations whose sinks fail
// apart: not one destination, nor a router without routes.
func splitBreaker(f Destinations) bool {
	if f == nil {
		return false
	}
	if _, one := f.(oneDestination); one {
		return false
	}
	if r, ok := f.(interface{ Routes() int }); ok {
		return r.Routes() > 0
	}
	return true
}

// probeHold bounds how long a message is handed back while its
// destination's probe is out.
const probeHold = 5 * time.Second

// unavailable says whether dest's breaker holds msg back now: open until
// its probe, or probing with the probe out. The first message after the
// pause is the probe. Called under f.mu.
func (g *gate) unavailable(now time.Time, hungAfter time.Duration) (hold time.Duration, held bool) {
	switch g.brk {
	case breakerOpen:
		if now.Before(g.brkUntil) {
			return max(g.brkUntil.Sub(now), holdMin), true
		}
		g.brk, g.probeAt = breakerProbing, now
		return 0, false
	case breakerProbing:
		if now.Sub(g.probeAt) >= hungAfter {
			// The probe never answered (released unpublished, or hung):
			// another one goes.
			g.probeAt = now
			return 0, false
		}
		return min(max(g.brkPause/2, holdMin), probeHold), true
	}
	return 0, false
}

// observe follows a publish to msg's destination: Unavailable opens its
// breaker (the pause doubling while probes are refused), any other answer
// closes it. It reports whether it opened (with the pause) or closed.
func (f *flowControl) observe(msg *Message, err error, floor func(time.Duration) time.Duration) (opened bool, pause time.Duration, closed bool, name string) {
	var unavailable *UnavailableError
	isUnavailable := errors.As(err, &unavailable)
	if !isUnavailable && !f.anyOpen.Load() {
		return false, 0, false, ""
	}
	dest := f.dests.Destination(msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !isUnavailable {
		g := f.gates[dest.Name]
		if g == nil || g.brk == breakerClosed {
			return false, 0, false, ""
		}
		g.brk = breakerClosed
		f.countOpen()
		return false, 0, true, dest.Name
	}
	g := f.gateLocked(dest)
	switch g.brk {
	case breakerOpen:
		return false, 0, false, ""
	case breakerProbing:
		g.brkPause = min(2*g.brkPause, SinkPauseMax)
	default:
		g.brkPause = SinkPauseMin
	}
	pause = max(g.brkPause, floor(unavailable.After))
	g.brk, g.brkUntil = breakerOpen, f.now().Add(pause)
	f.countOpen()
	return true, pause, false, dest.Name
}

// countOpen notes whether any destination's breaker is not closed (the
// fast path of an admission). Called under f.mu.
func (f *flowControl) countOpen() {
	open := false
	for _, g := range f.gates {
		open = open || g.brk != breakerClosed
	}
	f.anyOpen.Store(open)
}

// retryIn is how long a message its destination refused waits: until just
// before the destination's probe (see breaker.retryIn).
func (f *flowControl) retryIn(msg *Message) time.Duration {
	dest := f.dests.Destination(msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	g := f.gates[dest.Name]
	if g == nil || g.brk != breakerOpen {
		return 0
	}
	wait := g.brkUntil.Sub(f.now())
	return max(wait-min(wait/10, 250*time.Millisecond), 0)
}

// unavailableWhy is the error of a message held back by its destination's
// breaker.
func unavailableWhy(name string) string {
	return fmt.Sprintf("held back: destination %q is unavailable, waiting for its probe", name)
}

// observeSink tells the breaker of msg's destination, or the dispatcher's
// when it has one destination, what the sink answered.
func (d *Dispatcher) observeMessage(msg *Message, err error) {
	if d.flow == nil || !d.flow.split {
		d.observeSink(err)
		return
	}
	opened, pause, closed, name := d.flow.observe(msg, err, d.retryFloor)
	switch {
	case opened:
		d.stats.sinkPauses.Add(1)
		d.log.Error("destination unavailable; holding back its messages until a probe, the others go on",
			slog.String("destination", name), slog.Any("error", err), slog.Duration("probe_in", pause))
	case closed:
		d.log.Info("destination answered again; sending to it", slog.String("destination", name))
	}
}

// unavailableRetryIn is how long a message refused as unavailable waits.
func (d *Dispatcher) unavailableRetryIn(msg *Message) time.Duration {
	if d.flow == nil || !d.flow.split {
		return d.breaker.retryIn()
	}
	return d.flow.retryIn(msg)
}
