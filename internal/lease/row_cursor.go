package lease

import (
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// queueCursor is where an unordered row claim starts in the ready queue,
// which the claim walks in (available_at, id) order. Only the fetcher's
// goroutine touches it.
//
// A claim starts at the highest position claimed as of lookback rows ago,
// not at the front: the index entries of the rows claimed before stay in
// the ready index until a vacuum, and while a snapshot older than their
// claim is open anywhere (a long transaction, a replica's query with
// hot_standby_feedback) no scan may mark them dead, so a claim from the
// front walks every row claimed since that snapshot began. A row can
// commit behind the rows claimed: available_at is its transaction's start,
// and a transaction that began earlier may commit later; a release gives
// a row back where it was. Just behind, the next claim finds it; further
// behind, a sweep does: claims from the front, carried on from where the
// last one stopped until they reach the rows claimed before, started at
// least once per poll interval, when the fetcher wakes on a notification
// or registers as a waiter (a commit it may have missed), and after rows
// were given back. A pending, due row is therefore claimed at most a poll
// interval after it became visible, whatever its place.
type queueCursor struct {
	// claims are the last claims' highest positions (the highest claimed
	// so far, as of each) and sizes, oldest first, as many as it takes
	// to hold lookback rows after the first.
	claims []claimMark
	// sweeping is set while a sweep is under way; sweep is how far it got.
	sweeping bool
	sweep    store.Position
	// sweepAt is when the next sweep is due; sweepNext starts one at the
	// next claim.
	sweepAt   time.Time
	sweepNext bool
}

type claimMark struct {
	high store.Position
	rows int
}

// from is where the next claim starts, at now (wake: the fetcher woke on
// a notification, and may have missed the commit behind it).
func (c *queueCursor) from(now time.Time, poll time.Duration, wake bool) store.Position {
	if !c.sweeping && (wake || c.sweepNext || !now.Before(c.sweepAt)) {
		c.sweeping, c.sweep, c.sweepAt, c.sweepNext = true, store.Position{}, now.Add(poll), false
	}
	if c.sweeping {
		return c.sweep
	}
	return c.start()
}

// start is the highest position claimed as of lookback rows ago: the
// front until that many were claimed.
func (c *queueCursor) start() store.Position {
	n := 0
	for i := len(c.claims) - 1; i >= 0; i-- {
		if n >= lookback {
			return c.claims[i].high
		}
		n += c.claims[i].rows
	}
	return store.Position{}
}

// claimed records a claim of batch rows that took rows. A sweep carries
// on from its highest position until it reaches the rows claimed before
// it, or the end of the queue (fewer rows than asked for).
func (c *queueCursor) claimed(batch int, rows []store.Row) {
	var high store.Position
	n := 0
	for _, r := range rows {
		if r.Ready.IsZero() {
			continue // an expired lease, wherever it was
		}
		n++
		if high.Less(r.Ready) {
			high = r.Ready
		}
	}
	if c.sweeping {
		switch {
		case len(rows) < batch || n > 0 && !high.Less(c.start()):
			c.sweeping = false
		case n > 0:
			c.sweep = high
		}
	}
	if n == 0 {
		return
	}
	if last := len(c.claims) - 1; last >= 0 && high.Less(c.claims[last].high) {
		high = c.claims[last].high // a sweep that found rows behind only
	}
	c.claims = append(c.claims, claimMark{high: high, rows: n})
	// The oldest claim goes once the claims after the next one hold
	// lookback rows: start() no longer reaches it.
	after := 0
	for _, m := range c.claims[1:] {
		after += m.rows
	}
	for len(c.claims) > 1 && after-c.claims[1].rows >= lookback {
		after -= c.claims[1].rows
		c.claims = c.claims[1:]
	}
}
