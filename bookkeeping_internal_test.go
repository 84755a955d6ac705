package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock               { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// The breaker's whole cycle, step by step on a controlled clock: a trip
// pauses claims, the probe is one row, a probe refused again doubles the
// pause up to SinkPauseMax, any other answer closes it.
func TestBreakerCycle(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	b := &breaker{now: clk.now}
	gate := func(inflight int64) (int, time.Duration) { return b.gate(inflight) }

	limit, wait := gate(0)
	require.Equal(t, -1, limit, "closed: no limit")
	require.Zero(t, wait)
	require.False(t, b.paused())
	require.Zero(t, b.retryIn())

	pause, tripped := b.trip(0)
	require.True(t, tripped)
	require.Equal(t, SinkPauseMin, pause)
	_, tripped = b.trip(0)
	require.False(t, tripped, "a pause is reported once")
	require.True(t, b.paused())
	_, wait = gate(0)
	require.Equal(t, SinkPauseMin, wait, "open: wait for the probe")
	require.Equal(t, SinkPauseMin-100*time.Millisecond, b.retryIn(), "a refused message is due just before the probe")

	clk.advance(SinkPauseMin)
	limit, wait = gate(0)
	require.Equal(t, 1, limit, "probing: one row")
	require.Zero(t, wait)
	require.False(t, b.paused(), "probing releases nothing")
	b.claimed(1)
	limit, _ = gate(1)
	require.Zero(t, limit, "one probe at a time")
	limit, _ = gate(0)
	require.Equal(t, 1, limit, "a probe that ended without an answer lets the next claim probe")
	b.claimed(1)
	b.released()
	limit, _ = gate(1)
	require.Equal(t, 1, limit, "a probe released unpublished lets the next claim probe, though a hung publish holds its slot")

	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		pause, tripped = b.trip(0)
		require.True(t, tripped)
		require.Equal(t, want, pause, "each probe refused again doubles the pause, up to SinkPauseMax")
		clk.advance(pause)
		limit, _ = gate(0)
		require.Equal(t, 1, limit)
	}
	require.True(t, b.answered(), "an answer resumes")
	require.False(t, b.answered(), "once")
	limit, _ = gate(5)
	require.Equal(t, -1, limit)

	pause, _ = b.trip(90 * time.Second)
	require.Equal(t, 90*time.Second, pause, "the sink's own retry-after wins when longer")
	require.Equal(t, SinkPauseMin, b.pause, "and the backoff starts again")
}

// How many rows the dispatcher may hold and claim, as the publish average
// moves: enough for the workers to start each well inside the lease.
func TestClaimSizer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		publishes   []time.Duration
		limit, held int64
		batch       int
		wantHold    int64
		wantRoom    int64
	}{
		{name: "no sample: the prior (PublishTimeout) is cautious", limit: 1000, batch: 100, wantHold: 12, wantRoom: 12},
		{name: "fast sink: the limit, a batch at a time", publishes: []time.Duration{time.Millisecond}, limit: 1000, batch: 100, wantHold: 1000, wantRoom: 100},
		{name: "fast sink, batch not yet free", publishes: []time.Duration{time.Millisecond}, limit: 1000, held: 950, batch: 100, wantHold: 1000, wantRoom: 0},
		{name: "slow sink: half the lease per worker", publishes: []time.Duration{3 * time.Second}, limit: 1000, batch: 100, wantHold: 40, wantRoom: 40},
		{name: "a slower sample weighs half", publishes: []time.Duration{time.Second, 3 * time.Second}, limit: 1000, batch: 10, wantHold: 60, wantRoom: 10},
		{name: "a faster sample weighs an eighth", publishes: []time.Duration{3 * time.Second, time.Second}, limit: 1000, batch: 100, wantHold: 40, wantRoom: 40},
		{name: "slower than the window: one per worker", publishes: []time.Duration{time.Minute}, limit: 1000, batch: 10, wantHold: 4, wantRoom: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newClaimSizer(&Config{Workers: 4, Lease: time.Minute, PublishTimeout: 10 * time.Second})
			for _, d := range tc.publishes {
				p.observe(d)
			}
			require.Equal(t, tc.wantHold, p.holdMax(tc.limit))
			require.Equal(t, tc.wantRoom, p.claimRoom(tc.limit, tc.held, tc.batch))
		})
	}
}

// slots count what is held, and every give-back signals (once, however
// many come before the receive).
func TestSlots(t *testing.T) {
	t.Parallel()
	s := newSlots(10)
	s.take(7)
	require.EqualValues(t, 7, s.inUse())
	select {
	case <-s.released():
		require.FailNow(t, "nothing was given back yet")
	default:
	}
	s.give(3)
	s.give(2)
	require.EqualValues(t, 2, s.inUse())
	<-s.released()
	select {
	case <-s.released():
		require.FailNow(t, "two give-backs, one signal")
	default:
	}
}
