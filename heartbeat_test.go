package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// With heartbeats, a publish that takes longer than the lease keeps the
// lease: a second dispatcher polling all along never takes the row over.
func TestHeartbeatKeepsLongPublishExclusive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 1, "a")
	var mu sync.Mutex
	calls := 0
	slow := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		mu.Lock()
		calls++
		mu.Unlock()
		select {
		case <-time.After(4 * time.Second): // more than two and a half leases
			return nil
		case <-ctx.Done():
			return outbox.Retryable(ctx.Err())
		}
	})
	// A lease long enough that a loaded machine's scheduling stalls do not
	// let it lapse between two heartbeats.
	cfg := &outbox.Config{Lease: 1500 * time.Millisecond, HeartbeatInterval: 300 * time.Millisecond, PublishTimeout: 10 * time.Second}
	first := b.dispatcher(t, slow, cfg)
	start(t, first)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return calls == 1 }, 5*time.Second, 5*time.Millisecond)
	c2 := *cfg
	c2.PollInterval = 20 * time.Millisecond
	second := b.dispatcher(t, slow, &c2)
	start(t, second)

	eventually(t, func() bool { return b.tryCount("done") == 1 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, calls, "the row was delivered twice")
	require.Equal(t, int64(1), b.row(t, ids[0]).LeaseVersion)
	require.Positive(t, first.Stats().Heartbeats)
	require.Zero(t, first.Stats().LeaseLost+second.Stats().LeaseLost)
}

// A heartbeat that finds the lease lost cancels the publish.
func TestHeartbeatCancelsPublishOnLostLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 1, "a")
	started := make(chan struct{})
	cause := make(chan error, 1)
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return outbox.Retryable(ctx.Err())
	})
	d := b.dispatcher(t, sink, &outbox.Config{Lease: 3 * time.Second, HeartbeatInterval: 100 * time.Millisecond, PublishTimeout: time.Minute})
	start(t, d)
	<-started
	// Another worker re-claimed the row: a newer fencing token.
	b.exec(t, "UPDATE "+b.quoted+" SET lease_version = lease_version + 1 WHERE id = $1", ids[0])
	select {
	case err := <-cause:
		require.True(t, errors.Is(err, outbox.ErrLeaseLost), "publish cancelled with cause %v", err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the publish was not cancelled when its lease was lost")
	}
	eventually(t, func() bool { return d.Stats().LeaseLost == 1 })
	r := b.row(t, ids[0])
	require.Equal(t, "processing", r.Status, "the stale owner must not write the row")
	require.Equal(t, int64(2), r.LeaseVersion)
}

func TestHeartbeatConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil })
	_, err := outbox.NewDispatcher(b.pool, sink, &outbox.Config{Table: b.table, Lease: time.Second, PublishTimeout: 10 * time.Second})
	require.ErrorContains(t, err, "PublishTimeout")
	_, err = outbox.NewDispatcher(b.pool, sink, &outbox.Config{Table: b.table, Lease: time.Second, PublishTimeout: 10 * time.Second, HeartbeatInterval: 300 * time.Millisecond})
	require.NoError(t, err, "with heartbeats a publish may outlive the lease")
	_, err = outbox.NewDispatcher(b.pool, sink, &outbox.Config{Table: b.table, Lease: time.Second, HeartbeatInterval: 500 * time.Millisecond})
	require.ErrorContains(t, err, "HeartbeatInterval")
}

// hookRecorder records every hook event.
type hookRecorder struct {
	outbox.BaseHook
	mu        sync.Mutex
	claimed   int
	finalized int
	settled   map[int64][]outbox.SettleEvent
}

func (h *hookRecorder) OnClaim(ev outbox.ClaimEvent) {
	h.mu.Lock()
	h.claimed += ev.Rows
	h.mu.Unlock()
}

func (h *hookRecorder) OnFinalize(ev outbox.FinalizeEvent) {
	h.mu.Lock()
	h.finalized += ev.Rows
	h.mu.Unlock()
}

func (h *hookRecorder) OnSettle(ev outbox.SettleEvent) {
	h.mu.Lock()
	h.settled[ev.Message.ID] = append(h.settled[ev.Message.ID], ev)
	h.mu.Unlock()
}

func TestHookSeesEveryOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 3, "a")
	b.exec(t, "UPDATE "+b.quoted+" SET created_at = now() - interval '1 minute'")
	h := &hookRecorder{settled: map[int64][]outbox.SettleEvent{}}
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		switch m.ID {
		case ids[1]:
			if m.Attempt == 1 {
				return outbox.Retryable(errors.New("flaky"))
			}
		case ids[2]:
			return outbox.Permanent(errors.New("bad"))
		}
		return nil
	})
	drain(t, b.dispatcher(t, sink, &outbox.Config{Hook: h, RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond}))
	h.mu.Lock()
	defer h.mu.Unlock()
	outcomes := func(id int64) []outbox.Outcome {
		var out []outbox.Outcome
		for _, ev := range h.settled[id] {
			out = append(out, ev.Outcome)
		}
		return out
	}
	require.Equal(t, []outbox.Outcome{outbox.OutcomeDone}, outcomes(ids[0]))
	require.Equal(t, []outbox.Outcome{outbox.OutcomeRetry, outbox.OutcomeDone}, outcomes(ids[1]))
	require.Equal(t, []outbox.Outcome{outbox.OutcomeDead}, outcomes(ids[2]))
	require.Equal(t, 4, h.claimed)
	require.Equal(t, 4, h.finalized)
	done := h.settled[ids[0]][0]
	require.GreaterOrEqual(t, done.Lag, time.Minute, "lag is measured from created_at on the database clock")
	require.Less(t, done.Lag, 2*time.Minute)
	require.Error(t, h.settled[ids[2]][0].Err)
}
