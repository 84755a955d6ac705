package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeNow is a clock the test moves.
type fakeNow struct{ t time.Time }

func (c *fakeNow) now() time.Time { return c.t }

func newTestFlow(dest Destination, owner string, owners ...string) (*flowControl, *fakeNow) {
	clock := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	list := func(context.Context) ([]string, error) { return owners, nil }
	return newFlowControl(OneDestination(dest), owner, 10*time.Second, false, clock.now, list), clock
}

// The shares of three dispatchers add up to the limits: the rate and the
// burst split evenly (a burst of at least one each), the concurrency by
// rank, a dispatcher past the concurrency getting none.
func TestFlowSharesAddUpToTheLimits(t *testing.T) {
	t.Parallel()
	dest := Destination{Name: "partner", Rate: 30, Burst: 6, Concurrency: 4}
	var caps, bursts int
	var rates float64
	for _, owner := range []string{"a", "b", "c"} {
		f, _ := newTestFlow(dest, owner, "c", "a", "b")
		f.refresh(t.Context())
		rank, live := f.shares()
		require.Equal(t, 3, live)
		require.Equal(t, map[string]int{"a": 0, "b": 1, "c": 2}[owner], rank)
		g := f.gateLocked(dest)
		require.Equal(t, map[string]int{"a": 2, "b": 1, "c": 1}[owner], g.capShare)
		caps += g.capShare
		bursts += g.lim.Burst()
		rates += float64(g.lim.Limit())
	}
	require.Equal(t, 4, caps)
	require.Equal(t, 6, bursts)
	require.InDelta(t, 30, rates, 1e-9)

	// More dispatchers than the concurrency: each keeps one publish at a
	// time, or under shard leases its shards' messages would wait for
	// ever.
	f, _ := newTestFlow(Destination{Name: "partner", Concurrency: 2}, "c", "a", "b", "c")
	f.refresh(t.Context())
	require.Equal(t, 1, f.gateLocked(Destination{Name: "partner", Concurrency: 2}).capShare)

	// Alone (its own row not written yet), a dispatcher takes it all.
	f, _ = newTestFlow(dest, "a")
	f.refresh(t.Context())
	g := f.gateLocked(dest)
	require.Equal(t, 4, g.capShare)
	require.Equal(t, 6, g.lim.Burst())
}

// Past its concurrency a message is held back, and admitted again once a
// publish ends.
func TestFlowConcurrency(t *testing.T) {
	t.Parallel()
	f, _ := newTestFlow(Destination{Name: "partner", Concurrency: 2}, "a")
	msg := &Message{}
	done1, hold, _ := f.admit(t.Context(), msg)
	require.NotNil(t, done1)
	require.Zero(t, hold)
	done2, _, _ := f.admit(t.Context(), msg)
	require.NotNil(t, done2)
	done3, hold, why := f.admit(t.Context(), msg)
	require.Nil(t, done3, "a third publish in flight")
	require.GreaterOrEqual(t, hold, holdMin)
	require.Contains(t, why, `"partner"`)
	done1(30 * time.Millisecond)
	done4, _, _ := f.admit(t.Context(), msg)
	require.NotNil(t, done4, "a slot is free again")
}

// Past its rate, messages are held back for the time their turn comes,
// each one rate's interval after the one before: they come back at the
// pace of the budget, not all at once.
func TestFlowRateSchedulesHandBacks(t *testing.T) {
	t.Parallel()
	f, clock := newTestFlow(Destination{Name: "partner", Rate: 10}, "a")
	msg := &Message{}
	done, hold, _ := f.admit(t.Context(), msg)
	require.NotNil(t, done, "the burst of one")
	require.Zero(t, hold)
	done(time.Millisecond)
	var holds []time.Duration
	for range 3 {
		done, hold, why := f.admit(t.Context(), msg)
		require.Nil(t, done)
		require.Contains(t, why, "rate of 10 a second")
		holds = append(holds, hold)
	}
	require.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}, holds)
	clock.t = clock.t.Add(100 * time.Millisecond)
	done, hold, _ = f.admit(t.Context(), msg)
	require.NotNil(t, done, "a token a tenth of a second on")
	require.Zero(t, hold)

	// A destination without limits is never held.
	free, _ := newTestFlow(Destination{Name: "open"}, "a")
	for range 100 {
		done, _, _ := free.admit(t.Context(), msg)
		require.NotNil(t, done)
	}
}

func TestDestinationValidate(t *testing.T) {
	t.Parallel()
	for _, d := range []Destination{
		{Name: "x", Rate: -1}, {Name: "x", Rate: 2e6}, {Name: "x", Rate: 1e-9}, {Name: "x", Burst: 3},
		{Name: "x", Rate: 1, Burst: -1}, {Name: "x", Concurrency: -1},
	} {
		require.Error(t, d.Validate(), "%+v", d)
	}
	require.NoError(t, Destination{Name: "x", Rate: 0.5, Burst: 3, Concurrency: 4}.Validate())
	require.Error(t, (&Config{Table: "outbox", Owner: "o", Flow: OneDestination(Destination{Rate: -2})}).WithDefaults().Validate())
}

// A message handed back again joins the queue as it is then: the
// schedule does not grow with each hand-back of the same messages, only
// with the messages waiting.
func TestFlowScheduleIsTheQueueNotAHistory(t *testing.T) {
	t.Parallel()
	f, clock := newTestFlow(Destination{Name: "partner", Rate: 10}, "a")
	msg := &Message{}
	done, _, _ := f.admit(t.Context(), msg)
	done(time.Millisecond)
	for range 50 {
		// Three messages waiting, handed back again and again as they
		// come due, the budget spent each time by another.
		var holds []time.Duration
		for range 3 {
			_, hold, _ := f.admit(t.Context(), msg)
			holds = append(holds, hold)
		}
		require.LessOrEqual(t, holds[2], 400*time.Millisecond, "the third of three waiting")
		clock.t = clock.t.Add(holds[2])
		f.mu.Lock()
		f.gates["partner"].lim.ReserveN(clock.t, 1) // the token taken by a fresh message
		f.mu.Unlock()
	}
}

// Held for the concurrency behind a receiver that takes a second a
// publish, a backlog is never handed back for more than
// concurrencyHoldMax: it must not wait minutes once the receiver is fast
// again.
func TestFlowConcurrencyHoldIsBounded(t *testing.T) {
	t.Parallel()
	f, _ := newTestFlow(Destination{Name: "partner", Concurrency: 1}, "a")
	msg := &Message{}
	done, _, _ := f.admit(t.Context(), msg)
	require.NotNil(t, done)
	f.mu.Lock()
	f.gates["partner"].avg = time.Second
	f.mu.Unlock()
	var last time.Duration
	for range 100 {
		_, hold, _ := f.admit(t.Context(), msg)
		require.LessOrEqual(t, hold, concurrencyHoldMax)
		last = hold
	}
	require.Equal(t, concurrencyHoldMax, last)
}

// A publish hung past twice its timeout (a sink that ignores its
// context) stops taking a slot of the concurrency: the lease mode gave it
// up, and the dispatcher's other messages of the destination must not wait
// for it for good.
func TestFlowHungPublishFreesItsSlot(t *testing.T) {
	t.Parallel()
	f, clock := newTestFlow(Destination{Name: "partner", Concurrency: 1}, "a")
	msg := &Message{}
	hung, _, _ := f.admit(t.Context(), msg)
	require.NotNil(t, hung)
	held, _, _ := f.admit(t.Context(), msg)
	require.Nil(t, held, "the slot is taken")
	clock.t = clock.t.Add(20 * time.Second)
	next, _, _ := f.admit(t.Context(), msg)
	require.NotNil(t, next, "the hung publish no longer counts")
	hung(time.Minute) // it returns at last
	next(time.Millisecond)
	f.mu.Lock()
	require.Empty(t, f.gates["partner"].flights)
	f.mu.Unlock()
}

// Under row leases a message handed back may be claimed by any of the
// dispatchers, which send the whole rate together: the queue is paced at
// the whole rate, not this dispatcher's share of it.
func TestFlowPooledPace(t *testing.T) {
	t.Parallel()
	clock := &fakeNow{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	list := func(context.Context) ([]string, error) { return []string{"a", "b", "c"}, nil }
	f := newFlowControl(OneDestination(Destination{Name: "partner", Rate: 30}), "a", 10*time.Second, true, clock.now, list)
	msg := &Message{}
	done, _, _ := f.admit(t.Context(), msg)
	require.NotNil(t, done)
	_, first, _ := f.admit(t.Context(), msg)
	_, second, _ := f.admit(t.Context(), msg)
	require.Equal(t, 100*time.Millisecond, first, "this dispatcher's next token: a tenth of a second at its share of 10")
	require.InDelta(t, float64(time.Second/30), float64(second-first), float64(time.Millisecond), "paced at the whole 30 a second")
}
