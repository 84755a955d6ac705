package outbox

import "time"

// cooldown paces a fetcher that is not saturated. Two things cost the
// database when rows trickle in: claims that take a row or two each (a claim
// and a finalize cost nearly what a full batch does), and wake-ups, since
// every producer commit that notifies takes a global lock. Waiting before
// the next claim batches a trickle, at the price of latency; so the wait
// follows what claims cost now rather than a fixed delay:
//
//   - after a claim that returned less than it asked for, the fetcher
//     waits twice the running average claim duration (claims then take at
//     most about a third of its time), at most FetchCooldown;
//   - it registers as an idle listener at most once per that same wait,
//     and backs off (doubling, up to FetchCooldown) while the claims that
//     follow its wake-ups come back empty (woken for rows another
//     dispatcher took, or for none): only then do notifications buy
//     nothing. A wake-up that finds rows ends the back-off.
//
// On a quiet database a claim takes a fraction of a millisecond, so a
// message is claimed within a millisecond or two of its commit; on a busy
// one claims slow down and the fetcher batches more, up to FetchCooldown.
type cooldown struct {
	max      time.Duration // FetchCooldown
	claimAvg time.Duration // running average claim duration; 0: none yet
	backoff  time.Duration // registration back-off after empty wake-ups
}

// claimed records one claim: how long it took, how many rows it returned,
// and whether it was the first claim after a wake-up (it cleared the
// waiter row).
func (c *cooldown) claimed(took time.Duration, rows int, afterWake bool) {
	if c.claimAvg == 0 {
		c.claimAvg = took
	} else {
		c.claimAvg += (took - c.claimAvg) / 4
	}
	if !afterWake {
		return
	}
	if rows > 0 {
		c.backoff = 0
		return
	}
	c.backoff = min(max(2*c.backoff, c.pause(), time.Millisecond), c.max)
}

// pause is how long to wait after a partial claim.
func (c *cooldown) pause() time.Duration {
	if c.claimAvg == 0 {
		return c.max
	}
	return min(2*c.claimAvg, c.max)
}

// spacing is the least time between two registrations as an idle listener.
func (c *cooldown) spacing() time.Duration { return max(c.pause(), c.backoff) }
