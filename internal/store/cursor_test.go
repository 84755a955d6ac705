package store_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// enableCursor gives the bundle's table n shards and snapshot cursors.
func (b *testBundle) enableCursor(t *testing.T, n int) {
	t.Helper()
	require.NoError(t, b.enableShards(t, n))
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error { return b.st.EnableCursor(t.Context(), tx) }))
}

// enqueueIn inserts one row of aggregate agg in tx and returns its id.
func (b *testBundle) enqueueIn(t *testing.T, tx pgx.Tx, agg string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, tx.QueryRow(t.Context(), b.st.InsertSQL(1), "order", agg, "E", `{}`, nil).Scan(&id))
	return id
}

// origin is the server's origin, as cursor_origin.sql reads it.
func (b *testBundle) origin(t *testing.T) string {
	t.Helper()
	var o string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)`).Scan(&o))
	return o
}

// window loads one shard's window.
func (b *testBundle) window(t *testing.T, owner string, l store.ShardLease, hi string, after int64, limit int) store.Window {
	t.Helper()
	got, err := b.st.LoadWindows(t.Context(), b.pool, owner, []store.WindowLoad{{ShardLease: l, Hi: hi, After: after, Origin: b.origin(t)}}, limit)
	require.NoError(t, err)
	require.Len(t, got, 1, "the shard is held: its window comes back, empty or not")
	require.Equal(t, b.origin(t), got[0].Origin)
	return got[0]
}

// advance moves one shard's cursor and reports whether the fence held;
// an advance with no origin is made with the server's.
func (b *testBundle) advance(t *testing.T, owner string, a store.Advance, parks ...store.Park) bool {
	t.Helper()
	if a.Origin == "" {
		a.Origin = b.origin(t)
	}
	held, err := b.st.AdvanceCursors(t.Context(), b.pool, owner, []store.Advance{a}, parks)
	require.NoError(t, err)
	return held[a.Shard]
}

// drainCursor delivers every window of the one shard held, closing each,
// and returns the ids in the order delivered.
func (b *testBundle) drainCursor(t *testing.T, owner string, l store.ShardLease) []int64 {
	t.Helper()
	var out []int64
	for {
		w := b.window(t, owner, l, "", 0, 1000)
		if len(w.IDs) == 0 {
			return out
		}
		out = append(out, w.IDs...)
		require.True(t, b.advance(t, owner, store.Advance{ShardLease: l, Hi: w.Hi, Close: true}))
	}
}

func TestCursorEnable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.enqueue(t, msg{"a", "E"}, msg{"b", "E"}, msg{"x", "E"})
	b.exec(t, "UPDATE {{table}} SET status = 'done' WHERE id = $1", before[1])
	b.exec(t, "UPDATE {{table}} SET status = 'dead', attempts = 4, last_error = 'refused' WHERE id = $1", before[2])
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error { return b.st.EnableCursor(t.Context(), tx) })
	require.ErrorContains(t, err, "has no shards")
	b.enableCursor(t, 1)
	b.enableCursor(t, 1) // again: a no-op
	ok, err := b.st.CursorEnabled(t.Context(), b.pool)
	require.NoError(t, err)
	require.True(t, ok)
	after := b.enqueue(t, msg{"c", "E"})

	l := leasesOf(b.acquire(t, "d1", 1))[0]
	// The row unfinished when cursors were enabled is delivered, the done
	// one is not, and rows inserted since are.
	require.Equal(t, []int64{before[0], after[0]}, b.drainCursor(t, "d1", l))
	left, err := b.st.CursorUndelivered(t.Context(), b.pool, false)
	require.NoError(t, err)
	require.False(t, left)

	// The dead row from before is a parked dead message, as the dead
	// letters of a cursor table are, and is not delivered.
	dead, err := b.st.DeadList(t.Context(), b.pool, 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, before[2], dead[0].ID)
	require.Equal(t, 4, dead[0].Attempts)
}

// A transaction that commits late, after windows that began while it was
// open were delivered and closed, is delivered by the next window; one that
// rolls back never is.
func TestCursorLateCommitAndRollback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enableCursor(t, 1)
	l := leasesOf(b.acquire(t, "d1", 1))[0]

	late, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer late.Rollback(t.Context()) //nolint:errcheck // committed below
	lateID := b.enqueueIn(t, late, "a")
	doomed, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	doomedID := b.enqueueIn(t, doomed, "a")

	var delivered []int64
	for round := range 5 {
		ids := b.enqueue(t, msg{"a", "E"}, msg{"b", "E"})
		got := b.drainCursor(t, "d1", l)
		require.Equal(t, ids, got, "round %d: the committed rows, not the open ones", round)
		delivered = append(delivered, got...)
	}
	require.NoError(t, doomed.Rollback(t.Context()))
	require.Empty(t, b.drainCursor(t, "d1", l), "a rolled-back row is never delivered")
	left, err := b.st.CursorUndelivered(t.Context(), b.pool, false)
	require.NoError(t, err)
	require.False(t, left)

	require.NoError(t, late.Commit(t.Context()))
	left, err = b.st.CursorUndelivered(t.Context(), b.pool, false)
	require.NoError(t, err)
	require.True(t, left, "the late commit is undelivered")
	require.Equal(t, []int64{lateID}, b.drainCursor(t, "d1", l), "the late commit, below every id delivered, is found")
	require.NotContains(t, delivered, doomedID)
	require.Empty(t, b.drainCursor(t, "d1", l))
}

// A batch limited in size leaves its window open at (hi, last id); what
// commits meanwhile waits for the next window, and the rest of the open
// one is delivered, once, by whoever reads the shard next.
func TestCursorLimitSplitsAWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enableCursor(t, 1)
	l := leasesOf(b.acquire(t, "d1", 1))[0]
	first := b.enqueue(t, msg{"a", "E"}, msg{"b", "E"}, msg{"c", "E"}, msg{"d", "E"}, msg{"e", "E"})

	w := b.window(t, "d1", l, "", 0, 2)
	require.Equal(t, first[:2], w.IDs)
	require.True(t, b.advance(t, "d1", store.Advance{ShardLease: l, Hi: w.Hi, Last: w.IDs[1]}))
	later := b.enqueue(t, msg{"a", "E"})

	// The stored window resumes after its last id; the later row is not in it.
	w2 := b.window(t, "d1", l, "", 0, 2)
	require.Equal(t, w.Hi, w2.Hi)
	require.Equal(t, first[2:4], w2.IDs)
	// The caller's own position reads the same.
	require.Equal(t, first[2:4], b.window(t, "d1", l, w.Hi, w.IDs[1], 2).IDs)
	// A new window after the open one, before its cursor is advanced:
	// only what committed after the open one's snapshot.
	got, err := b.st.LoadWindows(t.Context(), b.pool, "d1", []store.WindowLoad{{ShardLease: l, Done: w.Hi, Origin: w.Origin}}, 10)
	require.NoError(t, err)
	require.Equal(t, later, got[0].IDs)
	require.False(t, got[0].Resumed)
	require.True(t, w2.Resumed)
	require.True(t, b.advance(t, "d1", store.Advance{ShardLease: l, Hi: w2.Hi, Last: w2.IDs[1]}))

	// Taken over: the new owner resumes the open window where it stood.
	b.expireShards(t)
	l2 := leasesOf(b.acquire(t, "d2", 1))[0]
	w3 := b.window(t, "d2", l2, "", 0, 2)
	require.Equal(t, first[4:], w3.IDs)
	require.True(t, b.advance(t, "d2", store.Advance{ShardLease: l2, Hi: w3.Hi, Close: true}))
	require.Equal(t, later, b.drainCursor(t, "d2", l2))
}

// A dispatcher whose shard was taken over cannot advance its cursor nor
// park anything: the new owner delivers the batch in flight again.
func TestCursorStaleAdvanceIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enableCursor(t, 1)
	l := leasesOf(b.acquire(t, "d1", 1))[0]
	ids := b.enqueue(t, msg{"a", "E"}, msg{"b", "E"})
	w := b.window(t, "d1", l, "", 0, 10)
	require.Equal(t, ids, w.IDs)

	b.expireShards(t)
	l2 := leasesOf(b.acquire(t, "d2", 1))[0]
	require.Greater(t, l2.Token, l.Token)
	park := store.Park{ID: ids[0], Shard: l.Shard, AggregateID: "a", Status: store.StatusPending, Attempts: 1, Error: "boom"}
	require.False(t, b.advance(t, "d1", store.Advance{ShardLease: l, Hi: w.Hi, Close: true}, park), "the old owner's advance is fenced off")
	parked, err := b.st.ReadParked(t.Context(), b.pool, "d2", []store.ShardLease{l2}, 10, nil, false)
	require.NoError(t, err)
	require.Empty(t, parked.Rows, "nothing of the fenced advance was written")
	_, err = b.st.LoadWindows(t.Context(), b.pool, "d1", []store.WindowLoad{{ShardLease: l}}, 10)
	require.NoError(t, err)
	require.Equal(t, ids, b.drainCursor(t, "d2", l2), "the new owner delivers the batch again")
}

// Exceptions are parked in the advance's statement: a retry comes back
// when due with its attempts, a dead message stays, a delivered one leaves;
// ordered, only the first parked message of an aggregate is read.
func TestCursorParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enableCursor(t, 1)
	l := leasesOf(b.acquire(t, "d1", 1))[0]
	ids := b.enqueue(t, msg{"a", "E"}, msg{"a", "E"}, msg{"b", "E"}, msg{"c", "E"})
	w := b.window(t, "d1", l, "", 0, 10)
	require.Equal(t, ids, w.IDs)
	require.True(t, b.advance(t, "d1", store.Advance{ShardLease: l, Hi: w.Hi, Close: true},
		store.Park{ID: ids[0], Shard: l.Shard, AggregateID: "a", Status: store.StatusPending, Attempts: 1, Error: "boom"},
		store.Park{ID: ids[1], Shard: l.Shard, AggregateID: "a", Status: store.StatusPending},
		store.Park{ID: ids[2], Shard: l.Shard, AggregateID: "b", Status: store.StatusPending, Delay: time.Hour, Attempts: 2, Error: "later"},
		store.Park{ID: ids[3], Shard: l.Shard, AggregateID: "c", Status: store.StatusDead, Attempts: 3, Error: "poison"},
	))
	read := func(ordered bool, inFlight ...int64) []store.Row {
		got, err := b.st.ReadParked(t.Context(), b.pool, "d1", []store.ShardLease{l}, 10, inFlight, ordered)
		require.NoError(t, err)
		if len(got.Rows) > 0 {
			require.Equal(t, b.origin(t), got.Origin)
		}
		return got.Rows
	}
	rows := read(false)
	require.Equal(t, []int64{ids[0], ids[1]}, idsOf(rows), "the due ones, not the one waiting an hour nor the dead one")
	require.Equal(t, 2, rows[0].Attempts, "the delivery about to be made")
	require.Equal(t, 1, rows[1].Attempts)
	require.Equal(t, []int64{ids[0]}, idsOf(read(true)), "ordered: the aggregate's first only")
	require.Equal(t, []int64{ids[1]}, idsOf(read(false, ids[0])), "in flight: left out")

	rows, _, err := b.st.FetchRows(t.Context(), b.pool, []int64{ids[1], ids[0]}, true, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1], ids[0]}, idsOf(rows), "fetched in the order asked")
	require.True(t, rows[0].Blocked, "an earlier message of its aggregate is parked")
	require.False(t, rows[1].Blocked)

	require.True(t, b.advance(t, "d1", store.Advance{ShardLease: l},
		store.Park{ID: ids[0], Shard: l.Shard, AggregateID: "a", Status: store.StatusDone}))
	require.Equal(t, []int64{ids[1]}, idsOf(read(true)), "the first delivered, the next is the head")
	left, err := b.st.CursorUndelivered(t.Context(), b.pool, false)
	require.NoError(t, err)
	require.True(t, left)
	require.True(t, b.advance(t, "d1", store.Advance{ShardLease: l},
		store.Park{ID: ids[1], Shard: l.Shard, AggregateID: "a", Status: store.StatusDone},
		store.Park{ID: ids[2], Shard: l.Shard, AggregateID: "b", Status: store.StatusDead, Attempts: 3, Error: "gave up"}))
	left, err = b.st.CursorUndelivered(t.Context(), b.pool, false)
	require.NoError(t, err)
	require.False(t, left, "only dead messages are left")

	// Held back behind a dead message of its aggregate, a message is
	// undelivered only unordered: ordered, it waits for an operator.
	behind := b.enqueue(t, msg{"b", "E"})[0]
	w = b.window(t, "d1", l, "", 0, 10)
	require.Equal(t, []int64{behind}, w.IDs)
	require.True(t, b.advance(t, "d1", store.Advance{ShardLease: l, Hi: w.Hi, Close: true},
		store.Park{ID: behind, Shard: l.Shard, AggregateID: "b", Status: store.StatusPending}))
	left, err = b.st.CursorUndelivered(t.Context(), b.pool, false)
	require.NoError(t, err)
	require.True(t, left)
	left, err = b.st.CursorUndelivered(t.Context(), b.pool, true)
	require.NoError(t, err)
	require.False(t, left, "ordered, it waits behind the dead one")
}

func idsOf(rows []store.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

// Batches written at once may close a window and read into the next: the
// stored cursor then stands in the next window, whose lower bound is the
// closed one's snapshot, so a takeover resumes there and delivers nothing
// of the closed window again, though the closed window holds ids above the
// position (a producer that took a lower id committed after it).
func TestCursorAdvanceIntoTheNextWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enableCursor(t, 1)
	l := leasesOf(b.acquire(t, "d1", 1))[0]
	slow, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer slow.Rollback(t.Context()) //nolint:errcheck // committed below
	low := []int64{b.enqueueIn(t, slow, "a"), b.enqueueIn(t, slow, "a")}
	high := b.enqueue(t, msg{"b", "E"})
	w1 := b.window(t, "d1", l, "", 0, 10)
	require.Equal(t, high, w1.IDs)
	require.NoError(t, slow.Commit(t.Context()))
	got, err := b.st.LoadWindows(t.Context(), b.pool, "d1", []store.WindowLoad{{ShardLease: l, Done: w1.Hi, Origin: w1.Origin}}, 10)
	require.NoError(t, err)
	w2 := got[0]
	require.Equal(t, low, w2.IDs)
	// The first window delivered whole, the second up to its first id.
	require.True(t, b.advance(t, "d1", store.Advance{ShardLease: l, Done: w1.Hi, Hi: w2.Hi, Last: low[0]}))

	b.expireShards(t)
	l2 := leasesOf(b.acquire(t, "d2", 1))[0]
	require.Equal(t, low[1:], b.drainCursor(t, "d2", l2), "only the rest of the second window")
}

// Snapshots read on another origin (before a failover: the new primary
// hands out again the transaction ids its old primary's snapshots count as
// ended) are neither read against nor written: the load says the shard
// moved, the advance and its parks are left out, and what is stored is
// read instead.
func TestCursorSnapshotsOfAnotherOriginAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enableCursor(t, 1)
	l := leasesOf(b.acquire(t, "d1", 1))[0]
	ids := b.enqueue(t, msg{"a", "E"}, msg{"b", "E"})
	w := b.window(t, "d1", l, "", 0, 1)
	require.Equal(t, ids[:1], w.IDs)

	other := "another timeline"
	got, err := b.st.LoadWindows(t.Context(), b.pool, "d1", []store.WindowLoad{{ShardLease: l, Hi: w.Hi, After: w.IDs[0], Origin: other}}, 10)
	require.NoError(t, err)
	require.Equal(t, []store.Window{{Shard: l.Shard, Origin: b.origin(t), Moved: true}}, got)
	got, err = b.st.LoadWindows(t.Context(), b.pool, "d1", []store.WindowLoad{{ShardLease: l, Done: w.Hi, Origin: other}}, 10)
	require.NoError(t, err)
	require.True(t, got[0].Moved)

	park := store.Park{ID: ids[0], Shard: l.Shard, AggregateID: "a", Status: store.StatusDead, Attempts: 1, Error: "boom"}
	require.False(t, b.advance(t, "d1", store.Advance{ShardLease: l, Hi: w.Hi, Close: true, Origin: other}, park))
	require.False(t, b.advance(t, "d1", store.Advance{ShardLease: l, Origin: other}, park), "a batch of parked messages neither")
	require.Equal(t, ids, b.drainCursor(t, "d1", l), "nothing was written: the stored cursor reads both")
}
