package outbox

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// The pause gate reads the pauses when told they changed, when busy and
// its read is a poll old, or while the whole table is paused; a pause
// seen lifted, or a message held back for a pause lifted before its write
// landed, has the fetcher wake the held messages.
func TestPauseGate(t *testing.T) {
	t.Parallel()
	var pauses []store.Pause
	reads := 0
	read := func(context.Context) ([]store.Pause, error) { reads++; return pauses, nil }
	g := newPauseGate(OneDestination(Destination{Name: "partner"}), read, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g.now = func() time.Time { return now }
	ctx := t.Context()
	msg := &Message{ID: 1}

	g.look(ctx, false)
	require.Equal(t, 1, reads, "read before the first claim")
	g.look(ctx, true)
	require.Equal(t, 1, reads, "fresh")

	pauses = []store.Pause{{Route: "partner", By: "alice"}}
	now = now.Add(time.Second)
	g.look(ctx, false)
	require.Equal(t, 1, reads, "idle: nothing read")
	g.look(ctx, true)
	require.Equal(t, 2, reads, "busy and a poll old")
	held, why := g.holds(msg)
	require.True(t, held)
	require.Contains(t, why, `"partner" is paused (by alice)`)
	require.False(t, g.whole())

	// Lifted while a message held back is on its way to its write.
	pauses = nil
	g.changed.Store(true)
	g.look(ctx, false)
	require.Equal(t, 3, reads, "a notification: read at once")
	require.True(t, g.wake.Swap(false), "a pause seen lifted wakes the held messages")
	g.settled(msg)
	require.True(t, g.wake.Swap(false), "a hold written after the lift wakes them again")

	pauses = []store.Pause{{Route: "", By: "carol"}}
	g.changed.Store(true)
	g.look(ctx, false)
	require.True(t, g.whole())
	g.settled(msg)
	require.False(t, g.wake.Load(), "still paused: no wake")
	now = now.Add(time.Second)
	g.look(ctx, false)
	require.Equal(t, 5, reads, "the whole table paused: read every poll interval")

	var nilGate *pauseGate
	held, _ = nilGate.holds(msg)
	require.False(t, held)
	require.False(t, nilGate.whole())
}
