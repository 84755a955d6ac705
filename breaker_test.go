package outbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// A sink that reports itself unavailable (credentials rotated) pauses the
// whole sink: claims stop, unstarted rows are released with their attempt
// refunded, one row probes after a backoff, and the first answer resumes
// delivery. Nothing goes dead and no attempt is spent.
func TestUnavailableSinkPausesClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 40
	b.enqueueN(t, n, "a")

	var down atomic.Bool
	down.Store(true)
	var refusedMu sync.Mutex
	refused := map[int64]bool{}
	var callsWhileDown atomic.Int64
	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		if down.Load() {
			callsWhileDown.Add(1)
			refusedMu.Lock()
			refused[m.ID] = true
			refusedMu.Unlock()
			return outbox.Unavailable(errors.New("NOAUTH authentication required"))
		}
		return nil
	})
	hook := &pauseHook{}
	d := b.dispatcher(t, sink, &outbox.Config{Workers: 2, BatchSize: 20, Hook: hook})
	start(t, d)

	eventually(t, func() bool { return d.Stats().SinkPauses >= 2 }, "the probe after the first pause did not pause again")
	// The first batch's two started publishes, then one probe per pause:
	// not every claimed row spent on a refusing sink.
	require.LessOrEqual(t, callsWhileDown.Load(), 2+d.Stats().SinkPauses, "publishes while the sink was paused")

	down.Store(false)
	refusedMu.Lock()
	nRefused := len(refused)
	refusedMu.Unlock()
	eventually(t, func() bool { return b.tryCount("done") == n-nRefused }, "delivery did not resume")
	require.Zero(t, b.tryCount("dead"))
	for _, r := range b.rows(t) {
		if r.Status == "pending" {
			require.Zero(t, r.Attempts, "a refusal spent the attempt of row %d", r.ID)
		}
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	require.GreaterOrEqual(t, len(hook.events), 3)
	require.True(t, hook.events[0].Paused)
	require.ErrorContains(t, hook.events[0].Err, "NOAUTH")
	require.Equal(t, outbox.SinkPauseMin, hook.events[0].Pause)
	require.Equal(t, 2*outbox.SinkPauseMin, hook.events[1].Pause, "a refused probe doubles the pause")
	require.False(t, hook.events[len(hook.events)-1].Paused, "no resumption reported")
}

type pauseHook struct {
	outbox.BaseHook
	mu     sync.Mutex
	events []outbox.SinkPauseEvent
}

func (h *pauseHook) OnSinkPause(ev outbox.SinkPauseEvent) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
}
