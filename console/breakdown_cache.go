package console

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/outboxd/outbox"
)

// blockedListed is how many blocked aggregates the overview lists.
const blockedListed = 20

// breakdownCache holds a table's latest breakdowns. They read every row not
// yet done (undelivered and dead), which grows with a backlog, so the
// sampler refreshes them every BreakdownInterval instead of each page load
// paying for them.
type breakdownCache struct {
	mu                   sync.Mutex
	at                   time.Time
	byEvent, byAggregate []BreakdownView
	// blocked is what waits behind dead heads, read with them (it reads
	// the pending rows too).
	blocked *outbox.Blocked
}

func (c *breakdownCache) get() (time.Time, []BreakdownView, []BreakdownView) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at, c.byEvent, c.byAggregate
}

// getBlocked is the blocked aggregates as last read.
func (c *breakdownCache) getBlocked() *outbox.Blocked {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocked
}

// refresh reads the breakdowns if they are older than every.
func (c *breakdownCache) refresh(ctx context.Context, t *table, every time.Duration) error {
	if at, _, _ := c.get(); !at.IsZero() && time.Since(at) < every {
		return nil
	}
	ev, ag, err := breakdowns(ctx, t)
	if err != nil {
		return err
	}
	blocked, err := t.admin.Blocked(ctx, blockedListed)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.at, c.byEvent, c.byAggregate, c.blocked = time.Now().UTC(), ev, ag, blocked
	c.mu.Unlock()
	return nil
}

// fill reads the breakdowns if they were never read.
func (c *breakdownCache) fill(ctx context.Context, t *table) error {
	return c.refresh(ctx, t, time.Duration(math.MaxInt64))
}
