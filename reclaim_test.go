package outbox_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// A dispatcher can hold two leases on one row: it claims the row again
// after losing the first lease while that lease's publish is still running
// (after a pause, say, with nobody else around). Heartbeats must keep the
// new lease alive after the old one is settled. The chaos suite's
// pause-reclaim-heartbeat scenario found this: the registry of held
// leases was keyed by row, so settling the old lease dropped the new one,
// which then expired mid-publish and was delivered again by another worker.
func TestHeartbeatKeepsReclaimedLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 1, "a")
	var mu sync.Mutex
	release := map[int64]chan struct{}{1: make(chan struct{}), 2: make(chan struct{})}
	started := make(chan int64, 4)
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		mu.Lock()
		ch := release[m.FencingToken]
		mu.Unlock()
		started <- m.FencingToken
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return outbox.Retryable(ctx.Err())
		}
	})
	const lease = 1500 * time.Millisecond
	d := b.dispatcher(t, sink, &outbox.Config{
		Lease: lease, HeartbeatInterval: 500 * time.Millisecond, PublishTimeout: time.Minute,
		PollInterval: 10 * time.Millisecond, Workers: 2, BatchSize: 1,
	})
	start(t, d)
	var once [3]sync.Once
	open := func(tok int64) { once[tok].Do(func() { close(release[tok]) }) }
	t.Cleanup(func() { open(1); open(2) }) // runs before Stop, which waits for publishes
	require.Equal(t, int64(1), <-started)
	// The first lease is lost and the row is ready again: the same
	// dispatcher claims it a second time while publish 1 still runs.
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'pending', lease_owner = NULL, lease_until = NULL WHERE id = $1", ids[0])
	select {
	case tok := <-started:
		require.Equal(t, int64(2), tok)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the row was not claimed again")
	}
	open(1) // the stale publish ends; its finalize is fenced off
	eventually(t, func() bool { return d.Stats().LeaseLost == 1 })
	// Publish 2 runs on for twice the lease: heartbeats must keep its lease.
	deadline := time.Now().Add(2 * lease)
	for time.Now().Before(deadline) {
		r := b.row(t, ids[0])
		require.Equal(t, "processing", r.Status)
		require.Equal(t, int64(2), r.LeaseVersion)
		require.NotNil(t, r.LeaseUntil)
		require.True(t, r.LeaseUntil.After(b.dbNow(t)), "lease 2 expired while its publish ran: heartbeats stopped")
		time.Sleep(50 * time.Millisecond)
	}
	open(2)
	eventually(t, func() bool { return b.tryCount("done") == 1 })
	require.Equal(t, int64(2), b.row(t, ids[0]).LeaseVersion)
}
