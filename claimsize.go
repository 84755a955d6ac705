package outbox

import (
	"sync"
	"time"
)

// claimSizer bounds how many rows a dispatcher holds so that its workers start
// every claimed row well inside the row's lease. A claimed row waits in the
// dispatcher until a worker is free, and nothing extends the lease of a row
// whose publish has not started (heartbeats extend only started publishes),
// so a row queued behind too many others would start with its lease nearly
// spent. The claimSizer keeps a running average of publish durations and allows
// as many rows in hand as the workers can start within half the lease.
type claimSizer struct {
	workers int
	window  time.Duration // half the lease: the time a row may wait to start

	mu  sync.Mutex
	avg time.Duration // running average publish duration; 0: no sample yet
	// prior stands for the average until the first publish has been
	// measured: the longest a publish may take (PublishTimeout), so a
	// dispatcher that knows nothing of its sink claims cautiously.
	prior time.Duration
}

func newClaimSizer(c *Config) *claimSizer {
	return &claimSizer{workers: c.Workers, window: c.Lease / 2, prior: c.PublishTimeout}
}

// observe adds one publish's duration to the average. The average follows a
// slower sink quickly (half weight on the new sample) and a faster one
// slowly (an eighth), so a sink that slows down does not leave more rows
// claimed than the workers can start in time.
func (p *claimSizer) observe(d time.Duration) {
	d = max(d, time.Microsecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.avg == 0:
		p.avg = d
	case d > p.avg:
		p.avg += (d - p.avg) / 2
	default:
		p.avg -= (p.avg - d) / 8
	}
}

// average is the running average publish duration (the prior before any
// publish was measured).
func (p *claimSizer) average() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.avg == 0 {
		return p.prior
	}
	return p.avg
}

// holdMax is how many rows the dispatcher may hold (claimed and not yet
// finalized): what the workers start within half the lease at the average
// publish duration, at least one per worker, at most limit.
func (p *claimSizer) holdMax(limit int64) int64 {
	avg := max(p.average(), time.Microsecond)
	n := int64(p.workers)
	if per := p.window / avg; per > 1 {
		n = int64(p.workers) * int64(per)
	}
	return max(min(n, limit), int64(p.workers), 1)
}

// claimRoom is how many rows the next claim may ask for, given the rows
// held: zero until room for a worthwhile claim has freed up (a full batch,
// or half of what may be held when that is less), so a saturated
// dispatcher claims in batches, not a row at a time as each one finishes.
func (p *claimSizer) claimRoom(limit, held int64, batch int) int64 {
	hold := p.holdMax(limit)
	room := hold - held
	if room < min(int64(batch), max(hold/2, 1)) {
		return 0
	}
	return min(room, int64(batch))
}
