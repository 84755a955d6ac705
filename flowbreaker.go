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

// unavailable says whether the gate's breaker holds a message back now
// (breaker.hold). Called under f.mu.
func (g *gate) unavailable(hungAfter time.Duration) (hold time.Duration, held bool) {
	hold, held = g.brk.hold(hungAfter)
	return max(hold, holdMin), held
}

// observe follows a publish to msg's destination: Unavailable trips its
// breaker (breaker.trip: the pause doubling while probes are refused), any
// other answer closes it. It reports whether it opened (with the pause)
// or closed.
func (f *flowControl) observe(msg *Message, err error, floor func(time.Duration) time.Duration) (opened bool, pause time.Duration, closed bool, name string) {
	var unavailable *UnavailableError
	isUnavailable := errors.As(err, &unavailable)
	if !isUnavailable && !f.anyOpen.Load() {
		return false, 0, false, ""
	}
	dest := f.dests.Destination(msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.countOpen()
	if !isUnavailable {
		g := f.gates[dest.Name]
		return false, 0, g != nil && g.brk.answered(), dest.Name
	}
	g := f.gateLocked(dest)
	pause, opened = g.brk.trip(floor(unavailable.After))
	return opened, pause, false, dest.Name
}

// countOpen notes whether any destination's breaker is not closed (the
// fast path of an admission). Called under f.mu.
func (f *flowControl) countOpen() {
	open := false
	for _, g := range f.gates {
		open = open || !g.brk.closed()
	}
	f.anyOpen.Store(open)
}

// retryIn is how long a message its destination refused waits: until just
// before the destination's probe (breaker.retryIn).
func (f *flowControl) retryIn(msg *Message) time.Duration {
	dest := f.dests.Destination(msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	if g := f.gates[dest.Name]; g != nil {
		return g.brk.retryIn()
	}
	return 0
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
