package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// newTestWorker is a worker whose publish is publish and whose verdicts
// are done on success, retry otherwise: the classification is the
// dispatcher's, tested on its own (classify_test.go).
func newTestWorker(cfg *Config, renewEvery time.Duration, publish func(context.Context, *Message) error) (*worker, *lease.Registry) {
	leases := lease.NewRegistry(nil)
	return &worker{
		cfg: cfg.publishConfig(renewEvery), breaker: &breaker{}, sizer: newClaimSizer(cfg), leases: leases,
		publish: publish, observe: func(*Message, error) {},
		classify: func(c *claimed, err error) verdict {
			if err != nil {
				return verdict{claim: c, outcome: OutcomeRetry, err: err, write: store.RowWrite{ID: c.msg.ID, LeaseVersion: c.msg.FencingToken, Status: store.StatusPending}}
			}
			return verdict{claim: c, outcome: OutcomeDone, write: store.RowWrite{ID: c.msg.ID, LeaseVersion: c.msg.FencingToken, Status: store.StatusDone}}
		},
	}, leases
}

func claimOf(id int64, leases *lease.Registry, trusted time.Duration) *claimed {
	born := time.Date(2026, 3, 1, 0, 0, 0, int(id), time.UTC)
	c := &claimed{msg: Message{ID: id, FencingToken: 7, CreatedAt: born}, dbNow: time.Now(), claimedAt: time.Now(), born: born}
	c.entry = &leases.Add([]store.Lease{c.lease()}, time.Now().Add(trusted))[0]
	return c
}

func TestWorkerVerdicts(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(10, 1) // PublishTimeout 1s, lease 1h
	refused := errors.New("receiver said 503")

	t.Run("published", func(t *testing.T) {
		t.Parallel()
		w, leases := newTestWorker(cfg, 0, func(context.Context, *Message) error { return nil })
		v := w.process(context.Background(), claimOf(1, leases, time.Hour))
		require.Equal(t, OutcomeDone, v.outcome)
		require.Positive(t, v.publishDur)
		require.False(t, leases.Publishing(store.Lease{ID: 1, Version: 7}), "the publish is marked ended")
	})
	t.Run("failed publish is classified", func(t *testing.T) {
		t.Parallel()
		w, leases := newTestWorker(cfg, 0, func(context.Context, *Message) error { return refused })
		v := w.process(context.Background(), claimOf(1, leases, time.Hour))
		require.Equal(t, OutcomeRetry, v.outcome)
		require.ErrorIs(t, v.err, refused)
	})
	t.Run("stopping releases unstarted rows", func(t *testing.T) {
		t.Parallel()
		w, leases := newTestWorker(cfg, 0, func(context.Context, *Message) error { panic("not to be called") })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		v := w.process(ctx, claimOf(1, leases, time.Hour))
		require.Equal(t, OutcomeReleased, v.outcome)
		require.True(t, v.write.Refund, "the attempt is refunded")
		require.Equal(t, store.StatusPending, v.write.Status)
		require.Equal(t, int64(7), v.write.LeaseVersion, "fenced on the lease it was claimed under")
		require.Equal(t, time.Date(2026, 3, 1, 0, 0, 0, 1, time.UTC), v.write.Born, "and on the row it was claimed from")
	})
	t.Run("too little lease left to start", func(t *testing.T) {
		t.Parallel()
		// Without renewals a publish must start with a quarter of the
		// lease or PublishTimeout left, whichever is less: here 1s.
		w, leases := newTestWorker(cfg, 0, func(context.Context, *Message) error { panic("not to be called") })
		v := w.process(context.Background(), claimOf(1, leases, 500*time.Millisecond))
		require.Equal(t, OutcomeReleased, v.outcome)
		require.ErrorContains(t, v.err, "lease too close to expiry")
		require.Zero(t, v.publishDur)
	})
	t.Run("with renewals the start window is one renewal", func(t *testing.T) {
		t.Parallel()
		// Renewals every 200ms: 900ms left is plenty, though less than the
		// second a publish without renewals would need.
		w, leases := newTestWorker(cfg, 200*time.Millisecond, func(context.Context, *Message) error { return nil })
		v := w.process(context.Background(), claimOf(1, leases, 900*time.Millisecond))
		require.Equal(t, OutcomeDone, v.outcome)
	})
	t.Run("a publish cut short by the lease is released", func(t *testing.T) {
		t.Parallel()
		// Without renewals the publish's timeout is capped at what is left
		// of the lease: a timeout there is not the message's fault.
		slow := stageConfig(10, 1)
		slow.PublishTimeout, slow.Lease = time.Hour, 2*time.Second // a start window of 500ms
		// 1.5s left: a second of margin over the window however loaded
		// the machine, and the publish is cut at 1.5s.
		w, leases := newTestWorker(slow, 0, func(ctx context.Context, _ *Message) error {
			<-ctx.Done()
			return ctx.Err()
		})
		v := w.process(context.Background(), claimOf(1, leases, 1500*time.Millisecond))
		require.Equal(t, OutcomeReleased, v.outcome)
		require.ErrorContains(t, v.err, "cut short by the lease")
	})
	t.Run("a lost lease cancels its publish", func(t *testing.T) {
		t.Parallel()
		started := make(chan struct{})
		w, leases := newTestWorker(cfg, time.Second, func(ctx context.Context, _ *Message) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx)
		})
		c := claimOf(1, leases, time.Hour)
		verdicts := make(chan verdict, 1)
		go func() { verdicts <- w.process(context.Background(), c) }()
		<-started
		leases.Cancel(c.lease(), lease.ErrLost) // what a keeper does on a lost lease
		v := <-verdicts
		require.Equal(t, OutcomeRetry, v.outcome)
		require.ErrorIs(t, v.err, ErrLeaseLost)
	})
}

// Workers publish every claim handed to them and answer each with one
// verdict, until the claims channel closes.
func TestWorkerRun(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(10, 1)
	w, leases := newTestWorker(cfg, 0, func(context.Context, *Message) error { return nil })
	in, out := make(chan *claimed, 5), make(chan verdict, 5)
	for id := range int64(5) {
		in <- claimOf(id+1, leases, time.Hour)
	}
	close(in)
	w.run(context.Background(), in, out)
	close(out)
	var ids []int64
	for v := range out {
		ids = append(ids, v.write.ID)
	}
	require.Equal(t, []int64{1, 2, 3, 4, 5}, ids)
}
