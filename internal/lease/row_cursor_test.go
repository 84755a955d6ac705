package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// queued are rows taken from the ready queue at ids from..to, all of one
// available_at.
func queued(at time.Time, from, to int64) []store.Row {
	var out []store.Row
	for id := from; id <= to; id++ {
		out = append(out, store.Row{ID: id, Ready: store.Position{At: at, ID: id}})
	}
	return out
}

func TestQueueCursor(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	at := t0.Add(-time.Minute)
	poll := time.Second
	pos := func(id int64) store.Position { return store.Position{At: at, ID: id} }
	var c queueCursor

	// The first claim sweeps from the front; with nothing claimed before,
	// it has caught up at once. Batches of 128: lookback is two of them.
	require.True(t, c.from(t0, poll, false).IsZero())
	c.claimed(128, queued(at, 1, 128))
	require.False(t, c.sweeping)
	c.claimed(128, queued(at, 129, 256))
	require.True(t, c.from(t0, poll, false).IsZero(), "the front until lookback rows were claimed after a claim")
	c.claimed(128, queued(at, 257, 384))
	require.Equal(t, pos(128), c.from(t0, poll, false), "the highest claimed as of lookback rows ago")
	c.claimed(128, queued(at, 385, 512))
	require.Equal(t, pos(256), c.from(t0, poll, false))
	require.Len(t, c.claims, 3, "no older claim kept than the one start reaches")

	// An expired lease claimed again has no place and moves nothing.
	c.claimed(129, append([]store.Row{{ID: 7}}, queued(at, 513, 640)...))
	require.Equal(t, pos(384), c.from(t0, poll, false))

	// A poll interval on, a sweep: from the front, carried on from its
	// highest row until it reaches the rows claimed before.
	t1 := t0.Add(poll)
	require.True(t, c.from(t1, poll, false).IsZero())
	c.claimed(10, queued(at, 50, 59)) // late commits behind, a full batch
	require.True(t, c.sweeping)
	require.Equal(t, pos(59), c.from(t1, poll, false))
	require.Equal(t, pos(640), c.claims[len(c.claims)-1].high, "a sweep's rows behind keep the highest claimed")
	c.claimed(10, queued(at, 641, 650)) // past the start: caught up
	require.False(t, c.sweeping)
	require.Equal(t, pos(384), c.from(t1, poll, false), "no sweep again before a poll interval")

	// A sweep that reaches the end of the queue ends there.
	require.True(t, c.from(t1.Add(poll), poll, false).IsZero())
	c.claimed(10, queued(at, 60, 62))
	require.False(t, c.sweeping)

	// A wake-up and a Sweep start one at once.
	require.True(t, c.from(t1.Add(poll), poll, true).IsZero(), "woken by a notification")
	c.claimed(10, nil)
	require.False(t, c.sweeping, "nothing left")
	require.Equal(t, pos(384), c.from(t1.Add(poll), poll, false))
	c.sweepNext = true
	require.True(t, c.from(t1.Add(poll), poll, false).IsZero(), "after registering as a waiter")
	require.False(t, c.sweepNext)

	// A sweep batch filled by expired leases alone goes on from where it was.
	c.claimed(2, []store.Row{{ID: 8}, {ID: 9}})
	require.True(t, c.sweeping)
	require.True(t, c.from(t1.Add(poll), poll, false).IsZero())
}
