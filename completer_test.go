package outbox

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// settled is one verdict as the completer settled it.
type settledVerdict struct {
	id   int64
	held bool
}

// newTestCompleter is a completer over mode alone; it records what it
// settles. confirm answers for the writes of a failed try.
func newTestCompleter(mode lease.Mode, hook Hook, clock lease.Clock, confirm func([]store.RowWrite) []bool) (*completer, *slots, *lease.Registry, func() []settledVerdict) {
	capacity := newSlots(64)
	leases := lease.NewRegistry(nil)
	var mu sync.Mutex
	var got []settledVerdict
	c := &completer{
		mode: mode, slots: capacity, leases: leases, batch: make([]verdict, 0, 64),
		engine: engine{hook: hook, stats: &counters{}, log: stageConfig(1, 1).Logger, clock: clock},
		settle: func(v *verdict, held bool) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, settledVerdict{v.write.ID, held})
		},
		confirm: func(_ context.Context, w []store.RowWrite) ([]bool, error) { return confirm(w), nil },
	}
	return c, capacity, leases, func() []settledVerdict {
		mu.Lock()
		defer mu.Unlock()
		return append([]settledVerdict(nil), got...)
	}
}

func verdictsOf(leases *lease.Registry, capacity *slots, ids ...int64) []verdict {
	out := make([]verdict, len(ids))
	for i, id := range ids {
		c := &claimed{msg: Message{ID: id, FencingToken: 3}}
		leases.Add([]store.Lease{c.lease()}, time.Now().Add(time.Minute))
		out[i] = verdict{claim: c, outcome: OutcomeDone, write: store.RowWrite{ID: id, LeaseVersion: 3, Status: store.StatusDone}}
	}
	capacity.take(len(ids))
	return out
}

// Verdicts that wait while a finalize runs go in the next one; each is
// settled with whether its fence held, its lease forgotten, the mode told,
// and its slot given back.
func TestCompleterBatchesAndSettles(t *testing.T) {
	t.Parallel()
	mode := &fakeMode{lostIDs: map[int64]bool{4: true}}
	hook := newStageHook()
	c, capacity, leases, settled := newTestCompleter(mode, hook, nil, nil)
	in := make(chan verdict, 8)
	for _, v := range verdictsOf(leases, capacity, 1, 2, 3, 4, 5) {
		in <- v
	}
	close(in)
	c.run(in)

	require.Equal(t, [][]store.RowWrite{{
		{ID: 1, LeaseVersion: 3, Status: store.StatusDone}, {ID: 2, LeaseVersion: 3, Status: store.StatusDone},
		{ID: 3, LeaseVersion: 3, Status: store.StatusDone}, {ID: 4, LeaseVersion: 3, Status: store.StatusDone},
		{ID: 5, LeaseVersion: 3, Status: store.StatusDone},
	}}, mode.finalized, "the verdicts waiting went in one statement")
	require.Equal(t, []settledVerdict{{1, true}, {2, true}, {3, true}, {4, false}, {5, true}}, settled())
	require.Len(t, mode.settled, 5)
	require.Zero(t, capacity.inUse())
	require.Zero(t, leases.UntilDeadline(store.Lease{ID: 1, Version: 3}), "forgotten")
	ev := <-hook.finalizes
	require.Equal(t, FinalizeEvent{Rows: 5, LeaseLost: 1, Duration: ev.Duration}, ev)
}

// A finalize that failed is tried again; a write the retry finds already
// made (the failed try committed and its reply was lost) is confirmed as
// held rather than reported as a lost lease.
func TestCompleterRetriesAndConfirms(t *testing.T) {
	t.Parallel()
	// The retry finds row 2 no longer pending: the first try wrote it.
	mode := &fakeMode{finalizeErrs: []error{errFake, nil}, lostIDs: map[int64]bool{2: true, 3: true}}
	hook := newStageHook()
	var asked []int64
	c, capacity, leases, settled := newTestCompleter(mode, hook, nil, func(w []store.RowWrite) []bool {
		out := make([]bool, len(w))
		for i := range w {
			asked = append(asked, w[i].ID)
			out[i] = w[i].ID == 2
		}
		return out
	})
	in := make(chan verdict, 4)
	for _, v := range verdictsOf(leases, capacity, 1, 2, 3) {
		in <- v
	}
	close(in)
	c.run(in)
	require.Len(t, mode.finalized, 2, "tried twice")
	require.Equal(t, []int64{2, 3}, asked, "only the writes that did not hold are confirmed")
	require.Equal(t, []settledVerdict{{1, true}, {2, true}, {3, false}}, settled())
	retry := <-hook.finalizes
	require.True(t, retry.Retrying)
	require.ErrorIs(t, retry.Err, errFake)
}

// A finalize that keeps failing is given up once the batch's leases can
// no longer hold: the rows stay as they are and pass on when their leases
// run out; nothing is settled as written.
func TestCompleterGivesUp(t *testing.T) {
	t.Parallel()
	mode := &fakeMode{finalizeErrs: []error{errFake, errFake, errFake, errFake, errFake, errFake}}
	hook := newStageHook()
	// Every reading of the clock is a second later.
	var mu sync.Mutex
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		at = at.Add(time.Second)
		return at
	}
	c, capacity, _, settled := newTestCompleter(mode, hook, clock, nil)
	in := make(chan verdict, 1)
	in <- verdictsOf(lease.NewRegistry(nil), capacity, 1)[0] // not registered: no lease to wait for
	close(in)
	c.run(in)
	require.Less(t, len(mode.finalized), 6, "given up before the errors ran out")
	require.Empty(t, settled(), "nothing settled as written")
	require.Len(t, mode.settled, 1, "the mode forgets the row: it is read or claimed again")
	require.Zero(t, capacity.inUse())
}
