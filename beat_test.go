package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// A dispatcher with nothing to do is listed as live, with what it
// delivered in the last minute; it is no longer listed once it stops.
func TestStatusListsLiveDispatchers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	st, err := b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Empty(t, st.Dispatchers, "none runs yet")
	require.NotNil(t, st.Dispatchers, "an empty list, not null")

	b.enqueueN(t, 3, "a")
	rec := newRecorder(nil)
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{Owner: "idle-one", Lease: 3 * time.Second})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	rec.waitLen(t, 3, 10*time.Second)

	// Idle now: it is listed, and its next beat counts the three.
	var live []outbox.LiveDispatcher
	require.Eventually(t, func() bool {
		st, err := b.admin.Status(t.Context())
		require.NoError(t, err)
		live = st.Dispatchers
		return len(live) == 1 && live[0].Delivered1m == 3
	}, 10*time.Second, 50*time.Millisecond, "%+v", live)
	l := live[0]
	require.Equal(t, "idle-one", l.Owner)
	require.Equal(t, "row", l.LeaseMode)
	require.NotEmpty(t, l.Host)
	require.NotEmpty(t, l.Version)
	require.Zero(t, l.InFlight)
	require.WithinDuration(t, b.dbNow(t), l.LastSeen, 5*time.Second)
	require.False(t, l.StartedAt.After(l.LastSeen))
	g, err := b.admin.Gauges(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, g.LiveDispatchers)

	cancel()
	require.NoError(t, <-done)
	st, err = b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Empty(t, st.Dispatchers, "a stopped dispatcher deletes its row")
}
