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

// An idle dispatcher writes its beat a sixth as often, and says so in its
// row, so it stays listed as live; once busy it beats at its pace again.
func TestIdleDispatcherBeatsLess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{Owner: "quiet-one", Lease: 3 * time.Second}) // beats every second
	start(t, d)
	row := func() (beat time.Duration, seen time.Time) {
		var us int64
		// No row before the first beat: a zero beat.
		_ = b.pool.QueryRow(t.Context(),
			"SELECT beat_us, last_seen FROM "+b.schema+".outbox_dispatchers WHERE owner = 'quiet-one'").Scan(&us, &seen)
		return time.Duration(us) * time.Microsecond, seen
	}
	require.Eventually(t, func() bool { beat, _ := row(); return beat == 6*time.Second }, 10*time.Second, 20*time.Millisecond,
		"an idle dispatcher's row says it beats every six seconds")
	_, seen := row()
	time.Sleep(2500 * time.Millisecond) // two beats and a half: none written
	beat, again := row()
	require.Equal(t, 6*time.Second, beat)
	require.Equal(t, seen, again, "no beat written while idle")
	st, err := b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Len(t, st.Dispatchers, 1, "listed as live")

	b.enqueueN(t, 1, "a")
	rec.waitLen(t, 1, 10*time.Second)
	require.Eventually(t, func() bool { beat, _ := row(); return beat == time.Second }, 10*time.Second, 20*time.Millisecond,
		"having delivered within the minute, it beats every second again")
}
