package lease

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// A shard is read from a little behind its position (lookback), which
// skips the rows in flight further back; a sweep from the front, skipping
// them by id, starts every poll interval and walks the shard to its end a
// prefix at a time.
func TestCursorSweeps(t *testing.T) {
	cs := cursors{}
	f := newFlight(true)
	at := time.Unix(0, 0)
	tokens := map[int]int64{0: 7}
	after, exclude := cs.plan([]int{0}, tokens, &f, nil, at, time.Second, true, false)
	require.Equal(t, map[int]int64{0: 0}, after)
	require.Empty(t, exclude)
	cs[0].advance(0, true, 4, 1000)
	for _, id := range []int64{10, 20, 900, 1000} {
		f.add(id, store.ShardLease{Shard: 0, Token: 7}, "a")
	}

	after, exclude = cs.plan([]int{0}, tokens, &f, nil, at.Add(time.Millisecond), time.Second, true, false)
	require.Equal(t, int64(1000-lookback), after[0], "read past what is in flight, but for the last ids")
	require.ElementsMatch(t, []int64{900, 1000}, exclude, "what is in flight in the lookback, skipped by id")

	after, exclude = cs.plan([]int{0}, tokens, &f, nil, at.Add(time.Second), time.Second, true, false)
	require.Zero(t, after[0], "a poll interval on, a sweep from the front")
	require.ElementsMatch(t, []int64{10, 20, 900, 1000}, exclude)
	cs[0].advance(0, true, 2, 25) // a late commit, 25, and one more
	after, _ = cs.plan([]int{0}, tokens, &f, nil, at.Add(time.Second), time.Second, true, false)
	require.Equal(t, int64(25), after[0], "the sweep goes on from where it got")
	cs[0].advance(25, true, 2, 1040)
	after, _ = cs.plan([]int{0}, tokens, &f, nil, at.Add(time.Second), time.Second, true, false)
	require.Equal(t, int64(1040-lookback), after[0], "past the position, the sweep is over")
	require.False(t, cs[0].sweeping)

	after, _ = cs.plan([]int{0}, tokens, &f, nil, at.Add(1500*time.Millisecond), time.Second, true, true)
	require.Zero(t, after[0], "a wake-up sweeps at once")
	cs[0].advance(0, false, 0, 0)
	require.False(t, cs[0].sweeping, "a sweep that read less than its limit reached the end")

	cs.due(0, at.Add(1600*time.Millisecond))
	after, _ = cs.plan([]int{0}, tokens, &f, nil, at.Add(1600*time.Millisecond), time.Second, true, false)
	require.Zero(t, after[0], "a row written back pending is due: swept for")

	after, _ = cs.plan([]int{0}, map[int]int64{0: 8}, &f, nil, at.Add(1700*time.Millisecond), time.Second, true, false)
	require.Zero(t, after[0], "under a new token, from the front")
	cs.forget(map[int]int64{})
	require.Empty(t, cs)
}

// An aggregate waits until the latest time it was told to.
func TestWaiting(t *testing.T) {
	w := waiting{}
	at := time.Unix(0, 0)
	w.until("a", at.Add(time.Second))
	w.until("a", at.Add(time.Millisecond))
	w.until("b", at.Add(time.Millisecond))
	require.ElementsMatch(t, []string{"a", "b"}, w.list(at))
	require.Equal(t, []string{"a"}, w.list(at.Add(time.Millisecond)))
	require.Empty(t, w.list(at.Add(time.Second)))
	require.Empty(t, w)
}

// A claim's second read (the room the other shards left) starts no sweep
// and skips what its first read returned: those rows are not in flight
// yet, and a sweep from the front would return them again.
func TestCursorSecondReadOfAClaim(t *testing.T) {
	cs := cursors{}
	f := newFlight(true)
	at := time.Unix(0, 0)
	tokens := map[int]int64{0: 7}
	cs.plan([]int{0}, tokens, &f, nil, at, time.Second, true, false)
	cs[0].advance(0, true, 2, 1020)
	read := []store.Row{{ID: 1010, Shard: 0}, {ID: 1020, Shard: 0}}
	after, exclude := cs.plan([]int{0}, tokens, &f, read, at.Add(time.Hour), time.Second, false, true)
	require.Equal(t, int64(1020-lookback), after[0], "no sweep starts in a claim's second read")
	require.Equal(t, []int64{1010, 1020}, exclude, "what the claim read, in the lookback, is skipped")
	cs[0].sweeping, cs[0].sweep = true, 5
	_, exclude = cs.plan([]int{0}, tokens, &f, read, at.Add(time.Hour), time.Second, false, false)
	require.Equal(t, []int64{1010, 1020}, exclude, "a sweep under way skips what the claim read")
}
