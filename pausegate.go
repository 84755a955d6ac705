package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// pausedHold is how long a message of a paused destination is handed back
// for. A resume makes such messages due at once (store.WakePaused, run by
// the resume and by each dispatcher that sees the pause lifted); the hold
// bounds how long one waits should every wake miss it, and how often a
// paused backlog is claimed again meanwhile.
const pausedHold = 15 * time.Minute

// pauseGate is what a dispatcher knows of the pauses of its table's
// destinations (Admin.Pause). They are read again when a notification
// says they changed, before a claim while the whole table is paused, and
// after a claim that returned rows when the last read is older than a
// poll interval: a dispatcher that does not hear the notifications obeys
// a pause within a poll interval of its next work, and an idle one reads
// nothing.
type pauseGate struct {
	dests Destinations // nil: every message to "default"
	read  func(context.Context) ([]store.Pause, error)
	every time.Duration
	now   func() time.Time
	log   *slog.Logger

	// changed is set by a notification; wake when a pause was seen lifted
	// or a message was held back for a pause no longer in force: the
	// fetcher then makes the held messages due.
	changed, wake atomic.Bool

	mu      sync.Mutex // one read at a time
	readAt  time.Time
	failing bool
	set     atomic.Pointer[pauseSet]
}

// pauseSet is the pauses in force as last read.
type pauseSet struct {
	whole  *store.Pause
	routes map[string]store.Pause
}

func newPauseGate(dests Destinations, read func(context.Context) ([]store.Pause, error), every time.Duration, log *slog.Logger) *pauseGate {
	g := &pauseGate{dests: dests, read: read, every: every, now: time.Now, log: log}
	g.set.Store(&pauseSet{})
	g.changed.Store(true) // read before the first claim
	return g
}

// look reads the pauses again when they changed, or when the last read is
// older than a poll interval and busy (a claim returned rows) or the whole
// table is paused.
func (g *pauseGate) look(ctx context.Context, busy bool) {
	if g == nil {
		return
	}
	due := (busy || g.whole()) && g.stale()
	if !g.changed.Load() && !due {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.changed.Store(false)
	ps, err := g.read(ctx)
	g.readAt = g.now()
	if err != nil {
		if !g.failing && ctx.Err() == nil {
			g.failing = true
			g.log.Warn("could not read the pauses; the ones last read stay in force", slog.Any("error", err))
		}
		return
	}
	g.failing = false
	next := &pauseSet{routes: map[string]store.Pause{}}
	for _, p := range ps {
		if p.Route == "" {
			next.whole = &p
		} else {
			next.routes[p.Route] = p
		}
	}
	prev := g.set.Swap(next)
	if prev.whole != nil && next.whole == nil {
		g.wake.Store(true)
	}
	for r := range prev.routes {
		if _, ok := next.routes[r]; !ok {
			g.wake.Store(true)
		}
	}
	g.logChanges(prev, next)
}

func (g *pauseGate) stale() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.now().Sub(g.readAt) >= g.every
}

// whole reports whether the whole table is paused.
func (g *pauseGate) whole() bool { return g != nil && g.set.Load().whole != nil }

// holds reports whether msg's destination is paused, and says which.
func (g *pauseGate) holds(msg *Message) (bool, string) {
	if g == nil {
		return false, ""
	}
	s := g.set.Load()
	if s.whole != nil {
		return true, fmt.Sprintf("held back: the table is paused (by %s)", s.whole.By)
	}
	if len(s.routes) == 0 {
		return false, ""
	}
	name := DefaultDestination
	if g.dests != nil {
		name = g.dests.Destination(msg).Name
	}
	if p, ok := s.routes[name]; ok {
		return true, fmt.Sprintf("held back: destination %q is paused (by %s)", name, p.By)
	}
	return false, ""
}

// settled follows the write of a message held back for a pause: if the
// pause was lifted meanwhile, the resume's wake may have run before the
// write, so the fetcher wakes the held messages again.
func (g *pauseGate) settled(msg *Message) {
	if held, _ := g.holds(msg); !held {
		g.wake.Store(true)
	}
}

func (g *pauseGate) logChanges(prev, next *pauseSet) {
	switch {
	case prev.whole == nil && next.whole != nil:
		g.log.Info("the table is paused: nothing is claimed until it is resumed",
			slog.String("by", next.whole.By), slog.String("reason", next.whole.Reason))
	case prev.whole != nil && next.whole == nil:
		g.log.Info("the table is resumed")
	}
	for r, p := range next.routes {
		if _, ok := prev.routes[r]; !ok {
			g.log.Info("destination paused: its messages are held back until it is resumed",
				slog.String("destination", r), slog.String("by", p.By), slog.String("reason", p.Reason))
		}
	}
	for r := range prev.routes {
		if _, ok := next.routes[r]; !ok {
			g.log.Info("destination resumed", slog.String("destination", r))
		}
	}
}

// Paused lists the pauses in force as this dispatcher last read them, the
// whole table's first.
func (d *Dispatcher) Paused() []Pause {
	s := d.pauses.set.Load()
	var out []Pause
	if s.whole != nil {
		out = append(out, Pause(*s.whole))
	}
	for _, p := range s.routes {
		out = append(out, Pause(p))
	}
	sortPauses(out)
	return out
}

// pausedBack is a message of a paused destination handed back: pending,
// no attempt spent, marked so that a resume finds it.
func pausedBack(c *claimed, why string) verdict {
	v := holdBack(c, pausedHold, why)
	v.write.Error = store.PausedError
	return v
}

// wakePaused makes the messages held back for a pause due now, if a pause
// was seen lifted, and has the mode look again at what it knew to wait.
func (f *fetcher) wakePaused(ctx context.Context) {
	if f.pauses == nil || !f.pauses.wake.Swap(false) {
		return
	}
	n, err := f.store.WakePaused(ctx, f.pool)
	if err != nil {
		// Tried again at the next turn of the loop (the claims back off
		// while the database fails); the hold bounds the wait meanwhile.
		f.pauses.wake.Store(true)
		if ctx.Err() == nil && !f.wakeFailing {
			f.log.Warn("could not make the messages held back for a pause due; trying again", slog.Any("error", err))
		}
		f.wakeFailing = true
		return
	}
	f.wakeFailing = false
	if n > 0 {
		f.log.Info("messages held back for a pause made due", slog.Int64("count", n))
	}
	f.mode.Due()
}
