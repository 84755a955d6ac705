package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/lease"
)

type ctxKey struct{}

// A publish's context behaves as WithoutCancel, WithCancelCause and
// WithTimeout stacked: the parent's values but not its cancellation, a
// deadline that ends it whether or not anything waits on it, a cancel whose
// cause the sink can read, and derived contexts that end with it.
func TestPublishCtx(t *testing.T) {
	t.Parallel()
	parent, stop := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
	stop()

	t.Run("values, not the parent's cancellation", func(t *testing.T) {
		t.Parallel()
		p := newPublishCtx(parent, time.Hour)
		defer p.end()
		require.Equal(t, "v", p.Value(ctxKey{}))
		require.NoError(t, p.Err())
		d, ok := p.Deadline()
		require.True(t, ok)
		require.WithinDuration(t, time.Now().Add(time.Hour), d, time.Minute)
	})
	t.Run("the deadline ends it unobserved", func(t *testing.T) {
		t.Parallel()
		p := newPublishCtx(context.Background(), time.Millisecond)
		time.Sleep(5 * time.Millisecond) // no Done asked for: no timer armed
		require.ErrorIs(t, p.Err(), context.DeadlineExceeded)
		require.ErrorIs(t, context.Cause(p), context.DeadlineExceeded)
		select {
		case <-p.Done():
		default:
			require.FailNow(t, "Done is not closed past the deadline")
		}
		p.end()
		require.True(t, p.timedOut(), "end keeps the deadline")
	})
	t.Run("the deadline closes Done and derived contexts", func(t *testing.T) {
		t.Parallel()
		p := newPublishCtx(context.Background(), 20*time.Millisecond)
		child, cancel := context.WithCancel(p)
		defer cancel()
		select {
		case <-child.Done():
		case <-time.After(5 * time.Second):
			require.FailNow(t, "the deadline did not end a derived context")
		}
		require.ErrorIs(t, p.Err(), context.DeadlineExceeded)
		require.ErrorIs(t, context.Cause(child), context.DeadlineExceeded)
		p.end()
		require.True(t, p.timedOut())
	})
	t.Run("a cancel carries its cause", func(t *testing.T) {
		t.Parallel()
		p := newPublishCtx(context.Background(), time.Hour)
		child, cancel := context.WithCancel(p)
		defer cancel()
		p.cancel(lease.ErrLost)
		<-child.Done()
		require.ErrorIs(t, p.Err(), context.Canceled)
		require.ErrorIs(t, context.Cause(p), ErrLeaseLost)
		require.ErrorIs(t, context.Cause(child), ErrLeaseLost)
		p.end()
		require.False(t, p.timedOut())
	})
	t.Run("ended in time", func(t *testing.T) {
		t.Parallel()
		p := newPublishCtx(context.Background(), time.Hour)
		<-time.After(time.Millisecond)
		_ = p.Done()
		p.end()
		require.ErrorIs(t, p.Err(), context.Canceled)
		require.False(t, p.timedOut())
	})
}

// A sink that answers a publish cut at its deadline with the error of a
// context it derived (a cancel) is classified as timed out, as it was
// with a deadline context.
func TestWorkerTimeoutThroughADerivedContext(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(10, 1)
	cfg.PublishTimeout = 20 * time.Millisecond
	w, leases := newTestWorker(cfg, time.Second, func(ctx context.Context, _ *Message) error {
		child, cancel := context.WithCancel(ctx)
		defer cancel()
		<-child.Done()
		return child.Err()
	})
	v := w.process(context.Background(), claimOf(1, leases, time.Hour))
	require.ErrorIs(t, v.err, context.DeadlineExceeded)
	require.False(t, errors.Is(v.err, ErrLeaseLost))
}
