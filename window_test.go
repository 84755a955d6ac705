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
// its attempt refunded instead of spending it (here, its only one). A fast
// first publish makes the dispatcher claim two rows at once; the sink then
// slows down beyond what the claim was sized for.
func TestPublishCutShortByTheLeaseRefundsTheAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 3, "a")
	warm, first, second := ids[0], ids[1], ids[2]

	var mu sync.Mutex
	calls := map[int64]int{}
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		mu.Lock()
		calls[m.ID]++
		n := calls[m.ID]
		mu.Unlock()
		switch {
		case m.ID == warm:
			return nil
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

	require.Equal(t, "done", b.row(t, warm).Status)
	require.Equal(t, "done", b.row(t, first).Status)
	r := b.row(t, second)
	require.Equal(t, "done", r.Status, "the cut-short publish spent the message's only attempt: %s", r.lastError())
	require.Equal(t, 1, r.Attempts, "the lease-capped attempt was not refunded")
	require.Zero(t, d.Stats().Dead)
	require.Equal(t, int64(1), d.Stats().Released, "the second row was not cut short by the lease")
}

// Without heartbeats, a dispatcher claims no more rows than its workers can
// start well inside the lease: one worker, a 1s lease and a sink taking
// 100ms per message must not claim a batch of 12 (the twelfth row would
// start after 1.1s), so every message is delivered on its first and only
// attempt and none is released for want of lease.
func TestClaimsNoMoreThanTheWorkersStartInsideTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 12, "a")

	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		select {
		case <-time.After(100 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return outbox.Retryable(ctx.Err())
		}
	})
	d := b.dispatcher(t, sink, &outbox.Config{
		Workers: 1, BatchSize: 20, Lease: time.Second, DisableNotify: true,
	})
	drain(t, d)

	for _, id := range ids {
		r := b.row(t, id)
		require.Equal(t, "done", r.Status, "row %d: %s", id, r.lastError())
		require.Equal(t, 1, r.Attempts, "row %d spent an attempt beyond its first", id)
	}
	st := d.Stats()
	require.Zero(t, st.Dead)
	require.Zero(t, st.Released, "rows were released for want of lease")
	require.Equal(t, int64(12), st.Done)
	require.Equal(t, int64(12), st.Claimed, "rows were claimed more than once")
}
