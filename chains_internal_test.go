package outbox

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

func chainRow(id, prev int64, agg string) store.Row {
	return store.Row{ID: id, Prev: prev, AggregateID: agg}
}

func chainClaim(r store.Row) *claimed {
	return &claimed{msg: Message{ID: r.ID, AggregateID: r.AggregateID}, agg: r.AggregateID}
}

func ids(rows []store.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func settle(cs *chains, outcome Outcome, held bool, cs2 ...*claimed) {
	batch := make([]verdict, len(cs2))
	hs := make([]bool, len(cs2))
	for i, c := range cs2 {
		batch[i], hs[i] = verdict{claim: c, outcome: outcome}, held
	}
	cs.settled(batch, hs)
}

// An aggregate's messages go out one after another: the first to the
// workers, the others queued, each handed to the worker that delivered the
// one before it.
func TestChainsDeliverOneAfterAnother(t *testing.T) {
	cs := newChains()
	cs.reading()
	kept, dropped := cs.admit([]store.Row{chainRow(1, 0, "a"), chainRow(2, 1, "a"), chainRow(3, 0, "b"), chainRow(4, 2, "a")})
	require.Equal(t, []int64{1, 2, 3, 4}, ids(kept))
	require.Empty(t, dropped)
	c := make(map[int64]*claimed)
	var sent []int64
	for _, r := range kept {
		c[r.ID] = chainClaim(r)
		if cs.start(c[r.ID]) {
			sent = append(sent, r.ID)
		}
	}
	require.Equal(t, []int64{1, 3}, sent, "one message per aggregate to the workers")

	next, released := cs.next(c[1], true)
	require.Same(t, c[2], next)
	require.Empty(t, released)
	next, _ = cs.next(c[2], true)
	require.Same(t, c[4], next)
	next, _ = cs.next(c[4], true)
	require.Nil(t, next, "the chain ran dry")
	next, _ = cs.next(c[3], true)
	require.Nil(t, next)

	// A read that began before 1's finalize committed names it as 5's
	// prev: it was written done since, and 5 may go.
	settle(cs, OutcomeDone, true, c[1], c[2], c[4], c[3])
	kept, dropped = cs.admit([]store.Row{chainRow(5, 4, "a")})
	require.Equal(t, []int64{5}, ids(kept))
	require.Empty(t, dropped)
	cs.reading()
	cs.reading()
	kept, dropped = cs.admit([]store.Row{chainRow(6, 3, "b")})
	require.Empty(t, kept, "3 was done two reads ago: a read naming it as prev did not see the table as it is")
	require.Equal(t, []int64{6}, ids(dropped))
}

// A row whose prev is neither in flight nor done waits: it is dead, backs
// off, or was not read yet.
func TestChainsHoldBackARowWhosePrevIsNotDelivered(t *testing.T) {
	cs := newChains()
	cs.reading()
	kept, dropped := cs.admit([]store.Row{chainRow(7, 3, "a"), chainRow(8, 7, "a"), chainRow(9, 0, "b")})
	require.Equal(t, []int64{9}, ids(kept))
	require.Equal(t, []int64{7, 8}, ids(dropped), "8 follows 7, which is not admitted")
}

// A message that is not delivered breaks its chain: what was queued behind
// it is released, and rows of the aggregate read before the chain is
// settled are not admitted.
func TestChainsBreakAtAFailure(t *testing.T) {
	cs := newChains()
	cs.reading()
	kept, _ := cs.admit([]store.Row{chainRow(1, 0, "a"), chainRow(2, 1, "a"), chainRow(3, 2, "a")})
	c := make([]*claimed, len(kept))
	for i, r := range kept {
		c[i] = chainClaim(r)
		cs.start(c[i])
	}
	next, released := cs.next(c[0], false)
	require.Nil(t, next)
	require.Equal(t, []*claimed{c[1], c[2]}, released)

	_, dropped := cs.admit([]store.Row{chainRow(4, 3, "a")})
	require.Equal(t, []int64{4}, ids(dropped), "the chain is broken until settled")
	settle(cs, OutcomeRetry, true, c[0])
	settle(cs, OutcomeReleased, true, c[1], c[2])
	require.Empty(t, cs.aggs, "settled, the chain is gone")
	kept, _ = cs.admit([]store.Row{chainRow(1, 0, "a")})
	require.Equal(t, []int64{1}, ids(kept), "the retry starts a new chain")
}

// A row admitted before its chain broke, and started after, is released
// unpublished.
func TestChainsStartAfterABreakReleases(t *testing.T) {
	cs := newChains()
	kept, _ := cs.admit([]store.Row{chainRow(1, 0, "a"), chainRow(2, 1, "a")})
	first, second := chainClaim(kept[0]), chainClaim(kept[1])
	require.True(t, cs.start(first))
	cs.next(first, false)
	require.True(t, cs.start(second), "handed to a worker")
	require.True(t, second.dropped, "to be released")
}

// A hung publish releases what waits behind it at once, and leaves its
// chain: its late return touches no chain built since.
func TestChainsHungPublishReleasesItsQueue(t *testing.T) {
	cs := newChains()
	kept, _ := cs.admit([]store.Row{chainRow(1, 0, "a"), chainRow(2, 1, "a")})
	hung, queued := chainClaim(kept[0]), chainClaim(kept[1])
	cs.start(hung)
	cs.start(queued)
	require.True(t, cs.hung(1))
	require.Equal(t, []*claimed{queued}, cs.takeOrphans())
	require.True(t, queued.dropped)
	settle(cs, OutcomeReleased, true, queued)
	require.Empty(t, cs.aggs)

	kept, _ = cs.admit([]store.Row{chainRow(1, 0, "a"), chainRow(2, 1, "a")})
	again, after := chainClaim(kept[0]), chainClaim(kept[1])
	require.True(t, cs.start(again))
	require.False(t, cs.start(after))
	next, released := cs.next(hung, true)
	require.Nil(t, next, "the hung publish's chain is not the new one")
	require.Empty(t, released)
	next, _ = cs.next(again, true)
	require.Same(t, after, next)
}
