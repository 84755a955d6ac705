package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// leaseRegistry holds what changes about a claimed row while it is in the
// dispatcher: when its lease is no longer trusted, where its publish is, and
// how to cancel that publish. The fetcher registers each claimed lease, the
// worker marks its publish, the heartbeat extends and cancels, and the
// completer forgets it once its outcome is written. Entries are keyed by
// lease, not row: a dispatcher that lost a lease may claim the row again
// before the old lease's publish has ended, and forgetting the old entry
// must not drop the new.
type leaseRegistry struct {
	// now is the clock (time.Now when nil; tests set their own).
	now func() time.Time

	mu sync.Mutex
	m  map[store.Lease]*leaseState
}

func (r *leaseRegistry) clock() time.Time {
	if r.now == nil {
		return time.Now()
	}
	return r.now()
}

type leaseState struct {
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
}

// phase is where a claimed row is.
type phase uint8

const (
	phaseQueued     phase = iota // waiting for a worker
	phasePublishing              // in the sink
	phasePublished               // waiting for its finalize
)

func newLeaseRegistry() *leaseRegistry {
	return &leaseRegistry{m: map[store.Lease]*leaseState{}}
}

// add registers freshly claimed leases, all trusted until deadline.
func (r *leaseRegistry) add(leases []store.Lease, deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range leases {
		r.m[l] = &leaseState{deadline: deadline}
	}
}

// forget drops leases whose outcome was written (or given up on).
func (r *leaseRegistry) forget(leases []store.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range leases {
		delete(r.m, l)
	}
}

// untilDeadline is how long l is still trusted (zero or less: no longer).
func (r *leaseRegistry) untilDeadline(l store.Lease) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[l]; ok {
		return s.deadline.Sub(r.clock())
	}
	return 0
}

// lastDeadline is the latest deadline among leases (zero if none is
// registered), taken under one lock for a whole batch.
func (r *leaseRegistry) lastDeadline(leases []store.Lease) time.Time {
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

// renew moves to deadline the deadline of every lease keep accepts, and
// returns how many it moved and the leases keep refused.
func (r *leaseRegistry) renew(deadline time.Time, keep func(store.Lease) bool) (kept int, lost []store.Lease) {
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

// overdue returns the leases being published past their deadline.
func (r *leaseRegistry) overdue() []store.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Lease
	now := r.clock()
	for l, s := range r.m {
		if s.phase == phasePublishing && !s.deadline.After(now) {
			out = append(out, l)
		}
	}
	return out
}

// begin records that l's publish starts now; cancel ends it.
func (r *leaseRegistry) begin(l store.Lease, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[l]; ok {
		s.phase, s.started, s.cancel = phasePublishing, r.clock(), cancel
	}
}

// end records that l's publish returned, and how long it took.
func (r *leaseRegistry) end(l store.Lease) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.m[l]
	if !ok {
		return 0
	}
	s.phase, s.cancel = phasePublished, nil
	return r.clock().Sub(s.started)
}

// extend moves l's deadline to deadline.
func (r *leaseRegistry) extend(l store.Lease, deadline time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.m[l]; ok {
		s.deadline = deadline
	}
}

// publishing reports whether l's publish is running.
func (r *leaseRegistry) publishing(l store.Lease) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.m[l]
	return ok && s.phase == phasePublishing
}

// cancel ends l's publish, if it is running, with cause.
func (r *leaseRegistry) cancel(l store.Lease, cause error) {
	r.mu.Lock()
	var cancel context.CancelCauseFunc
	if s, ok := r.m[l]; ok {
		cancel = s.cancel
	}
	r.mu.Unlock()
	if cancel != nil {
		cancel(cause)
	}
}

// beatable returns the leases a heartbeat extends: those whose publish has
// started, but not publishes that began before hungBefore (their sink
// ignores its context): those are marked hung, returned as newlyHung once,
// and left to their lease so a healthy dispatcher takes the row over.
// Queued rows are not extended: another dispatcher may take them once their
// claim's lease runs out.
func (r *leaseRegistry) beatable(hungBefore time.Time) (held, newlyHung []store.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held = make([]store.Lease, 0, len(r.m))
	for l, s := range r.m {
		switch {
		case s.phase == phaseQueued || s.hung:
		case s.phase == phasePublishing && s.started.Before(hungBefore):
			s.hung = true
			newlyHung = append(newlyHung, l)
		default:
			held = append(held, l)
		}
	}
	return held, newlyHung
}
