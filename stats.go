package outbox

import "sync/atomic"

// Stats are a dispatcher's counters since it was created.
type Stats struct {
	// Claims and Finalizes count the claim and finalize statements run:
	// together, the database round trips of the hot path (each one commit).
	Claims    int64
	Finalizes int64
	// Claimed counts rows leased.
	Claimed int64
	// Done, Retried, Deferred, Dead and Released count fenced writes that
	// held, by outcome.
	Done     int64
	Retried  int64
	Deferred int64
	Dead     int64
	Released int64
	// LeaseLost counts fenced writes that matched no row.
	LeaseLost int64
	// Wakeups counts notifications received.
	Wakeups int64
	// Heartbeats counts lease-extending heartbeat statements.
	Heartbeats int64
	// HungPublishes counts publishes that ran past PublishTimeout plus one
	// HeartbeatInterval with heartbeats on, whose leases were then left to
	// expire.
	HungPublishes int64
	// SinkPauses counts the pauses of the sink after it reported itself
	// [Unavailable].
	SinkPauses int64
}

type counters struct {
	claims, finalizes, claimed            atomic.Int64
	wakeups, heartbeats, hung, sinkPauses atomic.Int64
	// settled counts fenced writes by outcome, indexed like outcomes.
	settled [len(outcomes)]atomic.Int64
}

func (c *counters) count(o Outcome) {
	if i := o.index(); i >= 0 {
		c.settled[i].Add(1)
	}
}

func (c *counters) of(o Outcome) int64 { return c.settled[o.index()].Load() }

// Stats returns a snapshot of the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	c := &d.stats
	return Stats{
		Claims: c.claims.Load(), Finalizes: c.finalizes.Load(), Claimed: c.claimed.Load(),
		Done: c.of(OutcomeDone), Retried: c.of(OutcomeRetry), Deferred: c.of(OutcomeDefer),
		Dead: c.of(OutcomeDead), Released: c.of(OutcomeReleased), LeaseLost: c.of(OutcomeLeaseLost),
		Wakeups: c.wakeups.Load(), Heartbeats: c.heartbeats.Load(), HungPublishes: c.hung.Load(),
		SinkPauses: c.sinkPauses.Load(),
	}
}
