package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// Without heartbeats, a row that waited behind another in its batch gets
// only what is left of its lease. When that cut-short publish times out,
// the timeout is the lease's, not the message's: the row is released with
// its attempt refunded instead of spending it (here, its only one).
func TestPublishCutShortByTheLeaseRefundsTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 2, "a")
	first, second := ids[0], ids[1]

	var mu sync.Mutex
	calls := map[int64]int{}
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		mu.Lock()
		calls[m.ID]++
		n := calls[m.ID]
		mu.Unlock()
		switch {
		case m.ID == first:
			// Slow but inside its publish timeout: eats half the lease.
			select {
			case <-time.After(450 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return outbox.Retryable(ctx.Err())
			}
		case n == 1:
			<-ctx.Done() // a publish that needs its full timeout
			return outbox.Retryable(ctx.Err())
		}
		return nil
	})
	d := b.dispatcher(t, sink, &outbox.Config{
		Workers: 1, BatchSize: 2, MaxAttempts: 1, Lease: time.Second, PublishTimeout: 500 * time.Millisecond,
		DisableNotify: true,
	})
	drain(t, d)

	require.Equal(t, "done", b.row(t, first).Status)
	r := b.row(t, second)
	require.Equal(t, "done", r.Status, "the cut-short publish spent the message's only attempt: %s", r.lastError())
	require.Equal(t, 1, r.Attempts, "the lease-capped attempt was not refunded")
	require.Zero(t, d.Stats().Dead)
}
