package lease

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// A read fills its room from one shard after another, starting at the
// turn, so that few shards' rows are written per batch.
func TestUnitFill(t *testing.T) {
	require.Equal(t, []int{0, 5, 3, 0}, fill(8, []int{4, 5, 7, 9}, 1))
	require.Equal(t, []int{4, 1, 0, 3}, fill(8, []int{4, 5, 7, 3}, 3), "wraps around")
	require.Equal(t, []int{1, 0, 2}, fill(10, []int{1, 0, 2}, 0), "less than the room")
	require.Equal(t, []int{0, 0}, fill(5, []int{0, 0}, 7))
}

// A window's batches: the one taking the last id closes the window and
// moves done to its hi; one leaving ids behind keeps it open; a load that
// resumes an open window and finds nothing closes it with an empty batch,
// a new window found empty is dropped; only the complete front is ready.
func TestUnitWindow(t *testing.T) {
	l := store.ShardLease{Shard: 3, Token: 7}
	w := &window{token: 7}
	load, ok := w.plan(l)
	require.True(t, ok)
	require.Equal(t, store.WindowLoad{ShardLease: l}, load, "first, what is stored")

	require.Nil(t, w.load(l, store.Window{Shard: 3, Done: "d0", Hi: "h1", IDs: []int64{4, 6, 9}}, 3))
	require.True(t, w.more, "as many ids as the cache holds: there may be more")
	b1, ids := w.take(l, 2)
	require.Equal(t, []int64{4, 6}, ids)
	require.Equal(t, store.Advance{ShardLease: l, Done: "d0", Hi: "h1", Last: 6}, b1.advance())
	b2, ids := w.take(l, 5)
	require.Equal(t, []int64{9}, ids)
	require.False(t, b2.close, "more may follow in the window")
	load, ok = w.plan(l)
	require.True(t, ok)
	require.Equal(t, store.WindowLoad{ShardLease: l, Done: "d0", Hi: "h1", After: 9}, load)

	closing := w.load(l, store.Window{Shard: 3, Done: "d0", Hi: "h1", After: 9, Resumed: true}, 3)
	require.NotNil(t, closing, "the window had nothing left: an empty batch closes it")
	require.Equal(t, store.Advance{ShardLease: l, Done: "d0", Hi: "h1", Last: 9, Close: true}, closing.advance())
	load, _ = w.plan(l)
	require.Equal(t, store.WindowLoad{ShardLease: l, Done: "h1"}, load, "the next window after the closed one")
	require.Nil(t, w.load(l, store.Window{Shard: 3, Done: "h1", Hi: "h2"}, 3), "a new empty window: nothing to write")
	load, _ = w.plan(l)
	require.Equal(t, store.WindowLoad{ShardLease: l, Done: "h1"}, load)

	require.Empty(t, w.ready(), "nothing settled yet")
	for _, id := range []int64{4, 6} {
		require.True(t, b1.settle(id, store.RowWrite{ID: id, Status: store.StatusDone}))
	}
	require.False(t, b1.settle(4, store.RowWrite{ID: 4, Status: store.StatusDone}), "recorded once")
	require.Equal(t, []*batch{b1}, w.ready())
	require.True(t, b2.settle(9, store.RowWrite{ID: 9, Status: store.StatusPending, Error: "busy"}))
	require.Equal(t, []*batch{b2, closing}, w.ready())
	require.Equal(t, []store.Park{{ID: 9, Shard: 3, Status: store.StatusPending, Attempts: 1, Error: "busy"}}, b2.parks)
	adv, parks := writesOf([]*batch{b2, closing})
	require.Equal(t, []store.Advance{closing.advance()}, adv, "the last batch stands for the ones before it")
	require.Len(t, parks, 1)
}
