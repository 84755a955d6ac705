package outbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// A sink that reports itself unavailable (credentials rotated) pauses the
// whole sink: claims stop, unstarted rows are released with their attempt
// refunded, one row probes after a backoff, and the first answer resumes
// delivery of every message, the refused ones included. Nothing goes dead
// and no attempt is spent.
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
	require.NotEmpty(t, refused)
	refusedMu.Unlock()
	// The refused messages too: they are due again by the next probe.
	eventually(t, func() bool { return b.tryCount("done") == n }, "delivery did not resume")
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
	paused chan struct{} // if not nil, signalled on each pause
}

func (h *pauseHook) OnSinkPause(ev outbox.SinkPauseEvent) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
	if ev.Paused && h.paused != nil {
		select {
		case h.paused <- struct{}{}:
		default:
		}
	}
}

// Every pending message refused while the credential was broken: the probe
// must find one of them to try, so delivery resumes within a few probe
// intervals of the fix (the refusals used to park each message for 30 s,
// leaving the probe nothing to claim), and nothing spends an attempt.
func TestUnavailableSinkResumesAfterRefusingEveryMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 5
	b.enqueueN(t, n, "a")

	var down atomic.Bool
	down.Store(true)
	sink := outbox.SinkFunc(func(_ context.Context, m *outbox.Message) error {
		if down.Load() {
			return outbox.Unavailable(errors.New("WRONGPASS invalid username-password pair"))
		}
		return nil
	})
	hook := &pauseHook{paused: make(chan struct{}, 16)}
	d := b.dispatcher(t, sink, &outbox.Config{Workers: n, RetryBase: 100 * time.Millisecond, RetryCap: 500 * time.Millisecond, Hook: hook})
	start(t, d)
	<-hook.paused
	// Every message was refused, or released unstarted, and is back to
	// pending.
	eventually(t, func() bool { return b.tryCount("pending") == n && d.Stats().Deferred > 0 }, "messages not back to pending")
	down.Store(false)
	healed := time.Now()
	require.Eventually(t, func() bool { return b.tryCount("done") == n }, 4*outbox.SinkPauseMin, 10*time.Millisecond,
		"delivery did not resume within a few probe intervals of the fix")
	t.Logf("resumed %s after the fix", time.Since(healed))
	for _, r := range b.rows(t) {
		require.Equal(t, 1, r.Attempts, "row %d: the refusals spent no attempt", r.ID)
	}
}
