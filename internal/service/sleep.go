package service

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx is done; it reports whether ctx is still
// live. A d of zero or less returns at once.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Every runs turn at once, then again every d after each turn ends, until
// ctx is done; a turn in progress is not interrupted. It is the loop of
// every periodic job: retention, the console's sampler, the shard keeper.
func Every(ctx context.Context, d time.Duration, turn func()) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ctx.Err() != nil {
			return // both were ready: the end wins
		}
		turn()
		t.Reset(d)
	}
}
