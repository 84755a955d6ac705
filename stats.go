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
	claims, finalizes, claimed              atomic.Int64
	done, retried, deferred, dead, released atomic.Int64
	leaseLost, wakeups, heartbeats, hung    atomic.Int64
	sinkPauses                              atomic.Int64
}

func (c *counters) count(k outcomeKind) {
	switch k {
	case kindDone:
		c.done.Add(1)
	case kindRetried:
		c.retried.Add(1)
	case kindDeferred:
		c.deferred.Add(1)
	case kindDead:
		c.dead.Add(1)
	case kindReleased:
		c.released.Add(1)
	}
}

// Stats returns a snapshot of the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	c := &d.stats
	return Stats{
		Claims: c.claims.Load(), Finalizes: c.finalizes.Load(), Claimed: c.claimed.Load(),
		Done: c.done.Load(), Retried: c.retried.Load(), Deferred: c.deferred.Load(),
		Dead: c.dead.Load(), Released: c.released.Load(), LeaseLost: c.leaseLost.Load(),
		Wakeups: c.wakeups.Load(), Heartbeats: c.heartbeats.Load(), HungPublishes: c.hung.Load(),
		SinkPauses: c.sinkPauses.Load(),
	}
}
