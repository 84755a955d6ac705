package outbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// With heartbeats on, a publish that never returns (its sink ignores the
// context) must not keep its row, nor the not-yet-started rows of its batch,
// from another, healthy dispatcher: the hung lease is let go after the
// publish timeout plus one heartbeat interval, queued rows are never
// extended, and the hang is counted.
func TestHungPublishLetsItsRowsGo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 2, "a")

	release := make(chan struct{})
	entered := make(chan int64, 10)
	hanging := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		entered <- m.ID
		<-release // ignores its context
		return nil
	})
	hook := &hungHook{}
	cfg := &outbox.Config{
		Owner: "hung", Workers: 1, BatchSize: 2, Lease: 900 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, PublishTimeout: 200 * time.Millisecond, Hook: hook,
	}
	hung := b.dispatcher(t, hanging, cfg)
	require.NoError(t, hung.Start(t.Context()))
	t.Cleanup(func() {
		close(release)
		require.NoError(t, hung.Stop())
	})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no publish started")
	}
	require.Equal(t, int64(2), hung.Stats().Claimed, "one claim took both rows")

	rec := newRecorder(nil)
	healthy := b.dispatcher(t, rec.Sink(), &outbox.Config{Owner: "healthy", PollInterval: 20 * time.Millisecond})
	start(t, healthy)
	eventually(t, func() bool { return b.tryCount("done") == 2 }, "the healthy dispatcher never got the rows")
	require.ElementsMatch(t, ids, rec.IDs())
	require.Equal(t, int64(1), hung.Stats().HungPublishes)
	require.Equal(t, int64(1), hook.hung.Load())
}

type hungHook struct {
	outbox.BaseHook
	hung atomic.Int64
}

func (h *hungHook) OnHeartbeat(ev outbox.HeartbeatEvent) { h.hung.Add(int64(ev.Hung)) }
