package lease

import (
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// expiryWatch decides which expired leases a row claim looks for. Only
// the fetcher's goroutine touches it.
//
// Every row claimed leaves an entry in the index of processing rows, with
// its lease_until, until a vacuum removes it, and while a snapshot older
// than the claim is open anywhere (a long transaction, a replica's query
// with hot_standby_feedback) no scan may mark it dead. Once those leases
// are past, a look for expired leases from the front walks the entries of
// every row claimed since the snapshot began, more than a lease ago. So a
// claim looks at most once per poll interval, and for the leases that ran
// out since the last look began (a lease that runs out is seen by the
// first look that begins after it ran out: the write that set it would
// otherwise have had to last longer than the lease), except when the last
// look took a whole batch (more may wait), and from the front once per
// lease and at the start, which a lease left behind by a claim that failed
// to take it (SKIP LOCKED) needs.
type expiryWatch struct {
	// since is when the last look that took less than a batch began (the
	// database's now()); zero until a look began from the front.
	since time.Time
	// dueAt is when the next look is due, fullAt the next one from the
	// front (the local clock); again makes the next claim look.
	dueAt, fullAt time.Time
	again         bool
}

// next is which expired leases the claim made at now looks for.
func (e *expiryWatch) next(now time.Time) store.ExpiredLeases {
	switch {
	case e.since.IsZero() || !now.Before(e.fullAt):
		return store.ExpiredLeases{}
	case e.again || !now.Before(e.dueAt):
		return store.ExpiredLeases{Since: e.since}
	}
	return store.ExpiredLeases{Skip: true}
}

// looked records a claim made at now that looked as x, began at the
// database's dbNow (zero: unknown, the claim returned no row) and took
// expired leases of a batch of batch rows.
func (e *expiryWatch) looked(x store.ExpiredLeases, now, dbNow time.Time, poll, lease time.Duration, expired, batch int) {
	if x.Skip {
		return
	}
	e.dueAt, e.again = now.Add(poll), expired >= batch
	if x.Since.IsZero() {
		e.fullAt = now.Add(lease)
	}
	if !e.again && !dbNow.IsZero() {
		e.since = dbNow
	}
}
