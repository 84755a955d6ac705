package lease

import (
	"context"
	"sync"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// Registry holds what changes about a claimed row while it is in the
// dispatcher: when its lease is no longer trusted, where its publish is, and
// how to cancel that publish. The fetcher registers each claimed lease, the
// worker marks its publish, the heartbeat extends and cancels, and the
// completer forgets it once its outcome is written. Entries are keyed by
// lease, not row: a dispatcher that lost a lease may claim the row again
// before the old lease's publish has ended, and forgetting the old entry
// must not drop the new.
type Registry struct {
	// Clock is the registry's time (the wall clock when nil).
	Clock Clock

	mu sync.Mutex
	m  map[store.Lease]*leaseState
}

// Entry is one registered lease, as Add returns it: the worker that
// publishes its row reads and marks it through the entry, with no lookup.
// An entry forgotten reads as a lease not registered.
type Entry = leaseState

type leaseState struct {
	// gone is set once the lease is forgotten.
	gone bool
	// deadline is when this dispatcher stops trusting the lease: the lease
	// measured from before the claim (or the heartbeat that last extended
	// it) was sent, less a tenth for safety, so local timing can only err
	// on the early side of the database's clock.
	deadline time.Time
	phase    phase
	started  time.Time // when the publish began
	cancel   context.CancelCauseFunc
	// hung is set once a heartbeat found the publish running past
	// PublishTimeout plus a grace, and stopped extending its lease.
	hung bool
	// cancelled: the publish was cancelled (it may ignore it).
	cancelled bool
}

// phase is where a claimed row is.
type phase uint8

const (
	phaseQueued     phase = iota // waiting for a worker
	phasePublishing              // in the sink
	phasePublished               // waiting for its finalize
)

// NewRegistry returns an empty registry on clock (the wall clock when
// nil).
func NewRegistry(clock Clock) *Registry {
	return &Registry{Clock: clock, m: map[store.Lease]*leaseState{}}
}

// Add registers freshly claimed leases, all trusted until deadline, and
// returns their entries, in the same order.
func (r *Registry) Add(leases []store.Lease, deadline time.Time) []Entry {
	states := make([]leaseState, len(leases)) // one allocation per claim
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, l := range leases {
		states[i].deadline = deadline
		r.m[l] = &states[i]
	}
	return states
}

// IDs returns the ids of the rows registered.
func (r *Registry) IDs() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]int64, 0, len(r.m))
	for l := range r.m {
		ids = append(ids, l.ID)
	}
	return ids
}

// Forget drops leases whose outcome was written (or given up on).
func (r *Registry) Forget(leases []store.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range leases {
		if s, ok := r.m[l]; ok {
			s.gone = true
			delete(r.m, l)
		}
	}
}

// UntilDeadline is how long l is still trusted (zero or less: no longer).
func (r *Registry) UntilDeadline(l store.Lease) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[l]; ok {
		return s.deadline.Sub(r.Clock.Now())
	}
	return 0
}

// LastDeadline is the latest deadline among leases (zero if none is
// registered), taken under one lock for a whole batch.
func (r *Registry) LastDeadline(leases []store.Lease) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for _, l := range leases {
		if s, ok := r.m[l]; ok && s.deadline.After(last) {
			last = s.deadline
		}
	}
	return last
}

// Renew moves to deadline the deadline of every lease keep accepts, and
// returns how many it moved and the leases keep refused.
func (r *Registry) Renew(deadline time.Time, keep func(store.Lease) bool) (kept int, lost []store.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for l, s := range r.m {
		if keep(l) {
			s.deadline = deadline
			kept++
		} else {
			lost = append(lost, l)
		}
	}
	return kept, lost
}

// Overdue returns the leases being published past their deadline.
func (r *Registry) Overdue() []store.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Lease
	now := r.Clock.Now()
	for l, s := range r.m {
		if s.phase == phasePublishing && !s.deadline.After(now) {
			out = append(out, l)
		}
	}
	return out
}

// Remaining is how long e's lease is still trusted (zero or less: no
// longer, or forgotten).
func (r *Registry) Remaining(e *Entry) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.gone {
		return 0
	}
	return e.deadline.Sub(r.Clock.Now())
}

// Begin records that e's publish starts now; cancel ends it.
func (r *Registry) Begin(e *Entry, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !e.gone {
		e.phase, e.started, e.cancel, e.cancelled = phasePublishing, r.Clock.Now(), cancel, false
	}
}

// End records that e's publish returned, and how long it took.
func (r *Registry) End(e *Entry) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.gone {
		return 0
	}
	e.phase, e.cancel = phasePublished, nil
	return r.Clock.Now().Sub(e.started)
}

// Extend moves l's deadline to deadline.
func (r *Registry) Extend(l store.Lease, deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[l]; ok {
		s.deadline = deadline
	}
}

// Publishing reports whether l's publish is running.
func (r *Registry) Publishing(l store.Lease) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.m[l]
	return ok && s.phase == phasePublishing
}

// Cancel ends l's publish, if it is running, with cause, and reports
// whether it was running and not cancelled before (a hung publish ignores
// its cancel, and is found lost again at every renewal).
func (r *Registry) Cancel(l store.Lease, cause error) bool {
	r.mu.Lock()
	var cancel context.CancelCauseFunc
	if s, ok := r.m[l]; ok && !s.cancelled {
		cancel = s.cancel
		s.cancelled = cancel != nil
	}
	r.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
	return cancel != nil
}

// MarkHung marks hung the publishes that began before before and still
// run (their sink ignores its context), and returns those newly marked:
// their leases are no longer kept.
func (r *Registry) MarkHung(before time.Time) (newly []store.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for l, s := range r.m {
		if s.phase == phasePublishing && !s.hung && s.started.Before(before) {
			s.hung = true
			newly = append(newly, l)
		}
	}
	return newly
}

// Beatable returns the leases a heartbeat extends: those whose publish has
// started and is not hung. Queued rows are not extended: another
// dispatcher may take them once their claim's lease runs out.
func (r *Registry) Beatable() []store.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := make([]store.Lease, 0, len(r.m))
	for l, s := range r.m {
		if s.phase != phaseQueued && !s.hung {
			held = append(held, l)
		}
	}
	return held
}

// Len is how many leases are registered: the messages held.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
