package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
)

// enableShards gives the bundle's table n shards.
func (b *testBundle) enableShards(t *testing.T, n int) error {
	t.Helper()
	return pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error { return b.st.EnableShards(t.Context(), tx, n) })
}

// expireShards ends every shard lease now, as if its owner had died.
func (b *testBundle) expireShards(t *testing.T) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), "UPDATE "+b.st.Table.String()+"_shards SET lease_until = now() - interval '1 second' WHERE owner IS NOT NULL")
	require.NoError(t, err)
}

func (b *testBundle) acquire(t *testing.T, owner string, n int) []store.AcquiredShard {
	t.Helper()
	got, err := b.st.AcquireShards(t.Context(), b.pool, owner, time.Minute, n, 10)
	require.NoError(t, err)
	return got
}

func leasesOf(a []store.AcquiredShard) []store.ShardLease {
	out := make([]store.ShardLease, len(a))
	for i := range a {
		out[i] = a[i].ShardLease
	}
	return out
}

func shardsOf(a []store.AcquiredShard) []int {
	out := make([]int, len(a))
	for i := range a {
		out[i] = a[i].Shard
	}
	return out
}

// doneWrites are done writes for rows read under leases.
func doneWrites(leases []store.AcquiredShard, rows []store.Row) []store.RowWrite {
	token := map[int]int64{}
	for _, l := range leases {
		token[l.Shard] = l.Token
	}
	out := make([]store.RowWrite, len(rows))
	for i, r := range rows {
		out[i] = store.RowWrite{ID: r.ID, Shard: r.Shard, LeaseVersion: token[r.Shard], Born: r.CreatedAt, Status: store.StatusDone}
	}
	return out
}

func (b *testBundle) readShards(t *testing.T, owner string, held []store.AcquiredShard, inFlight []int64, perShard int) []store.Row {
	t.Helper()
	rows, _, err := b.st.ReadShards(t.Context(), b.pool, store.ShardReadParams{Owner: owner, Reads: store.ReadsFromFront(leasesOf(held), perShard), InFlight: inFlight, Ordered: true})
	require.NoError(t, err)
	return rows
}

func TestEnableShards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	before := b.enqueue(t, msg{"a", "E"}, msg{"b", "E"}, msg{"a", "E"})
	require.NoError(t, b.enableShards(t, 8))
	after := b.enqueue(t, msg{"a", "E"}, msg{"c", "E"})

	shardOf := func(id int64) int {
		var s int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT shard FROM "+b.st.QuotedTable()+" WHERE id = $1", id).Scan(&s))
		require.True(t, s >= 0 && s < 8, "shard %d", s)
		return s
	}
	require.Equal(t, shardOf(before[0]), shardOf(before[2]), "one aggregate, one shard")
	require.Equal(t, shardOf(before[0]), shardOf(after[0]), "rows before and after enabling agree")
	shardOf(before[1])
	shardOf(after[1])

	require.NoError(t, b.enableShards(t, 8), "enabling again is a no-op")
	n, err := b.st.ShardCount(t.Context(), b.pool)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.ErrorContains(t, b.enableShards(t, 4), "already has 8 shards")
	require.ErrorContains(t, b.enableShards(t, 0), "shard count must be 1 to 4096")
}

func TestShardLeasesShareAndRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 8))

	a := b.acquire(t, "A", 8)
	require.Len(t, a, 8)
	require.Empty(t, b.acquire(t, "B", 8), "every shard is held")
	_, alive, err := b.st.RenewShards(t.Context(), b.pool, "B", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, 1, alive, "B is alive, A has not renewed yet")
	held, alive, err := b.st.RenewShards(t.Context(), b.pool, "A", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, 2, alive)
	require.Len(t, held, 8)

	released, err := b.st.ReleaseShards(t.Context(), b.pool, "A", leasesOf(a[4:]))
	require.NoError(t, err)
	require.ElementsMatch(t, shardsOf(a[4:]), released)
	got := b.acquire(t, "B", 4)
	require.ElementsMatch(t, shardsOf(a[4:]), shardsOf(got))
	for _, g := range got {
		require.Zero(t, g.Strikes, "a released shard carries no strike")
	}
	held, _, err = b.st.RenewShards(t.Context(), b.pool, "A", time.Minute, 0)
	require.NoError(t, err)
	require.Len(t, held, 4)
}

func TestShardReadAndFinalize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 4))
	ids := b.enqueueN(t, 12)
	a := b.acquire(t, "A", 4)
	rows := b.readShards(t, "A", a, []int64{ids[0]}, 100)
	require.Len(t, rows, 11, "every pending row but the one in flight")
	last := map[int]int64{}
	for _, r := range rows {
		require.Greater(t, r.ID, last[r.Shard], "oldest first within a shard")
		last[r.Shard] = r.ID
	}

	writes := doneWrites(a, rows)
	writes[0].Status, writes[0].Delay, writes[0].Error = store.StatusPending, time.Hour, "503"
	writes[1].Status, writes[1].Error = store.StatusDead, "422"
	made, err := b.st.FinalizeShards(t.Context(), b.pool, "A", writes)
	require.NoError(t, err)
	for i, m := range made {
		require.True(t, m, "write %d", i)
	}
	retried := b.row(t, writes[0].ID)
	require.Equal(t, store.StatusPending, retried.Status)
	require.Equal(t, 1, retried.Attempts)
	require.Equal(t, "503", *retried.LastError)
	require.Equal(t, store.StatusDead, b.row(t, writes[1].ID).Status)
	done := b.row(t, writes[2].ID)
	require.Equal(t, store.StatusDone, done.Status)
	require.Equal(t, 1, done.Attempts, "the delivery that finished it counts, as under row leases")
	require.Equal(t, writes[2].LeaseVersion, done.LeaseVersion, "the token of the delivery that wrote it")

	rows = b.readShards(t, "A", a, nil, 100)
	require.Len(t, rows, 1, "only the row that was in flight: done, dead and backed-off rows are not read")
	require.Equal(t, ids[0], rows[0].ID)
}

// A row gone from the table and its id handed out again (a failover, a
// restore): a write meant for the old row does not land on the new one,
// though the shard and its token are the same.
func TestShardFinalizeFencesOnTheRowNotItsID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 1))
	ids := b.enqueueN(t, 1)
	a := b.acquire(t, "A", 1)
	old := b.readShards(t, "A", a, nil, 10)
	require.Len(t, old, 1)
	b.exec(t, "DELETE FROM {{table}} WHERE id = $1", ids[0])
	b.exec(t, "INSERT INTO {{table}} (id, aggregate_type, aggregate_id, event_type, payload, created_at) "+
		"OVERRIDING SYSTEM VALUE VALUES ($1, 'order', 'other', 'Reborn', '{}', $2)", ids[0], old[0].CreatedAt.Add(time.Second))
	reborn := b.readShards(t, "A", a, nil, 10)
	require.Len(t, reborn, 1)

	made, err := b.st.FinalizeShards(t.Context(), b.pool, "A", doneWrites(a, old))
	require.NoError(t, err)
	require.Equal(t, []bool{false}, made, "the old row's write landed on the new row")
	made, err = b.st.FinalizeShards(t.Context(), b.pool, "A", doneWrites(a, reborn))
	require.NoError(t, err)
	require.Equal(t, []bool{true}, made)
}

// A dispatcher whose shard was taken over cannot write any of its rows.
func TestShardFenceAfterTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 1))
	b.enqueueN(t, 3)
	a := b.acquire(t, "A", 1)
	rows := b.readShards(t, "A", a, nil, 10)
	require.Len(t, rows, 3)

	b.expireShards(t) // A stalls past its lease
	took := b.acquire(t, "B", 1)
	require.Len(t, took, 1)
	require.Equal(t, a[0].Token+1, took[0].Token)

	made, err := b.st.FinalizeShards(t.Context(), b.pool, "A", doneWrites(a, rows))
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false}, made, "the old token writes nothing")
	for _, r := range rows {
		require.Equal(t, store.StatusPending, b.row(t, r.ID).Status)
	}
	made, err = b.st.FinalizeShards(t.Context(), b.pool, "B", doneWrites(took, rows))
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, made)
}

// A finalize in flight holds its shard: a takeover attempted meanwhile
// does not get it, and the one after the commit reads none of the rows the
// finalize wrote.
func TestShardFenceFinalizeBeforeTakeover(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 1))
	b.enqueueN(t, 3)
	a := b.acquire(t, "A", 1)
	rows := b.readShards(t, "A", a, nil, 10)
	b.expireShards(t) // A's lease ran out, but nobody took the shard yet

	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // after Commit, a no-op
	made, err := b.st.FinalizeShards(t.Context(), tx, "A", doneWrites(a, rows))
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, made, "the token still holds")

	require.Empty(t, b.acquire(t, "B", 1), "the shard is locked by the finalize in flight")
	require.NoError(t, tx.Commit(t.Context()))

	took := b.acquire(t, "B", 1)
	require.Len(t, took, 1)
	again := b.readShards(t, "B", took, nil, 10)
	require.Empty(t, again, "the new owner does not deliver what the old one finalized")
}

// A takeover charges a crash only to the message its owner declared it was
// delivering alone; otherwise it charges nothing and isolates the shard up
// to the last message the owner can have had in flight.
func TestShardStrikes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 1))
	ids := b.enqueueN(t, 15)

	a := b.acquire(t, "A", 1)
	require.Zero(t, a[0].Strikes, "a shard never held has no strike")
	require.Nil(t, a[0].IsolateThrough, "nor any isolation")

	b.expireShards(t)
	a = b.acquire(t, "B", 1)
	require.Zero(t, a[0].Strikes, "nothing was declared: nobody is charged")
	require.Nil(t, a[0].Attempts)
	require.NotNil(t, a[0].IsolateThrough)
	require.Equal(t, ids[9], *a[0].IsolateThrough, "isolated up to the window's last pending id")
	require.Zero(t, b.attempts(t, ids[0]))

	declare := func(owner string, a store.AcquiredShard, id *int64) {
		t.Helper()
		got, err := b.st.Isolate(t.Context(), b.pool, owner, []store.Isolation{{ShardLease: a.ShardLease, ID: id}})
		require.NoError(t, err)
		require.Equal(t, []int{a.Shard}, got)
	}
	owner := "B"
	for want := 1; want <= 3; want++ {
		declare(owner, a[0], &ids[1])
		b.expireShards(t)
		owner = map[string]string{"A": "B", "B": "A"}[owner]
		a = b.acquire(t, owner, 1)
		require.Equal(t, want, a[0].Strikes)
		require.Equal(t, ids[1], *a[0].StrikeID, "charged to the declared message, not the head")
		require.Equal(t, want, *a[0].Attempts)
		require.Equal(t, want, b.attempts(t, ids[1]))
		require.Zero(t, b.attempts(t, ids[0]), "the head, never declared, is never charged")
	}

	declare(owner, a[0], &ids[2])
	b.expireShards(t)
	a = b.acquire(t, "C", 1)
	require.Equal(t, 1, a[0].Strikes, "a newly declared message starts again")
	require.Equal(t, ids[2], *a[0].StrikeID)

	stale := a[0]
	b.expireShards(t)
	a = b.acquire(t, "D", 1)
	got, err := b.st.Isolate(t.Context(), b.pool, "C", []store.Isolation{{ShardLease: stale.ShardLease, ID: &ids[3]}})
	require.NoError(t, err)
	require.Empty(t, got, "a lost owner declares nothing")

	declare("D", a[0], nil)
	_, err = b.st.ReleaseShards(t.Context(), b.pool, "D", leasesOf(a))
	require.NoError(t, err)
	a = b.acquire(t, "E", 1)
	require.Zero(t, a[0].Strikes, "an ended isolation and a release charge nothing")
	require.Nil(t, a[0].IsolateThrough)
	require.Nil(t, a[0].Attempts)
}

// attempts reads a row's attempts.
func (b *testBundle) attempts(t *testing.T, id int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT attempts FROM "+b.st.Table.String()+" WHERE id = $1", id).Scan(&n))
	return n
}

// The read walks the shard index, whatever the statistics: a primary-key
// walk would read every done row before the pending ones.
func TestShardReadPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 16))
	for _, status := range []string{"pending", "done"} {
		// Statistics taken while every row was pending, and again once
		// nearly all are done: neither may tempt the planner off the index.
		b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status)
			SELECT 'order', g::text, 'E', '{}', $1 FROM generate_series(1, 5000) AS g`, status)
		b.exec(t, "ANALYZE {{table}}")
		lines := b.explainRead(t, "EXPLAIN", []int32{0, 1, 2, 3}, 1, []int64{0, 0, 0, 0}, 7)
		plan := strings.Join(lines, "\n")
		require.Contains(t, plan, "outbox_shard_ready", plan)
		require.NotContains(t, plan, "outbox_pkey", plan)
		for _, line := range lines {
			if strings.Contains(line, "Seq Scan") {
				require.Contains(t, line, "outbox_shards", "only the shard table, a row per shard, is scanned:\n%s", plan)
			}
		}
	}
}

// explainRead explains the shard read of shards, each after its position
// with limit rows, held by "A" under token 1, under a generic plan (the
// plan a prepared statement settles on).
func (b *testBundle) explainRead(t *testing.T, explain string, shards []int32, token int64, after []int64, limit int32) []string {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), "SET LOCAL plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	tokens, limits := make([]int64, len(shards)), make([]int32, len(shards))
	for i := range shards {
		tokens[i], limits[i] = token, limit
	}
	rows, err := tx.Query(t.Context(), explain+" "+b.st.ShardReadSQL(), shards, tokens, after, limits, "A", []int64{}, []string{}, false, true)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return lines
}

// A read returns a prefix of the shard's queue, each row with the one
// before it in its aggregate; an aggregate whose head backs off or is dead
// is not read at all, other aggregates are. Unordered, every due row is.
func TestShardReadPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 1))
	ids := b.enqueue(t, msg{"x", "E"}, msg{"x", "E"}, msg{"y", "E"}, msg{"x", "E"})
	a := b.acquire(t, "A", 1)

	rows := b.readShards(t, "A", a, nil, 10)
	require.Equal(t, ids, rowIDs(rows))
	require.Equal(t, []int64{0, ids[0], 0, ids[1]}, prevs(rows))
	require.Equal(t, []int64{ids[1], ids[2], ids[3]}, rowIDs(b.readShards(t, "A", a, []int64{ids[0]}, 10)), "in flight, skipped")

	read := func(after int64) []int64 {
		got, _, err := b.st.ReadShards(t.Context(), b.pool, store.ShardReadParams{Owner: "A", Reads: []store.ShardRead{{ShardLease: a[0].ShardLease, After: after, Limit: 10}}, Ordered: true})
		require.NoError(t, err)
		return rowIDs(got)
	}
	require.Equal(t, []int64{ids[2], ids[3]}, read(ids[1]), "after a position")

	retry := doneWrites(a, rows[:1])
	retry[0].Status, retry[0].Delay = store.StatusPending, time.Hour
	_, err := b.st.FinalizeShards(t.Context(), b.pool, "A", retry)
	require.NoError(t, err)
	// x1 follows a row waiting for its retry, and is not read; x3 is, and
	// the dispatcher holds it back: its prev, x1, is not delivered.
	require.Equal(t, []int64{ids[2], ids[3]}, read(0), "x's head backs off")

	b.exec(t, "UPDATE {{table}} SET status = 'dead' WHERE id = $1", ids[0])
	require.Equal(t, []int64{ids[2], ids[3]}, read(0), "a dead row holds the row after it")
	got, _, err := b.st.ReadShards(t.Context(), b.pool, store.ShardReadParams{Owner: "A", Reads: []store.ShardRead{{ShardLease: a[0].ShardLease, Limit: 10}}, Waiting: []string{"x"}, Ordered: true})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2]}, rowIDs(got), "an aggregate known to wait is not read")
	got, _, err = b.st.ReadShards(t.Context(), b.pool, store.ShardReadParams{Owner: "A", Reads: []store.ShardRead{{ShardLease: a[0].ShardLease, Limit: 10}}, Ordered: true, HeadsOnly: true})
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2]}, rowIDs(got), "heads only: x3 follows x1, which waits behind the dead x0")
	for _, headsOnly := range []bool{false, true} {
		got, _, err = b.st.ReadShards(t.Context(), b.pool, store.ShardReadParams{Owner: "A", Reads: []store.ShardRead{{ShardLease: a[0].ShardLease, Limit: 10}}, HeadsOnly: headsOnly})
		require.NoError(t, err)
		require.Equal(t, []int64{ids[1], ids[2], ids[3]}, rowIDs(got), "unordered, a dead row holds nothing back (heads only: %v)", headsOnly)
		require.Equal(t, []int64{0, 0, 0}, prevs(got), "unordered, a row's aggregate is not looked at")
	}
	b.exec(t, "UPDATE {{table}} SET status = 'done' WHERE id = $1", ids[0])
	require.Equal(t, []int64{ids[1], ids[2], ids[3]}, read(0))
}

func prevs(rows []store.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.Prev
	}
	return out
}

// Leaving frees every shard still under the owner's name, those it does
// not know it holds included, and drops its membership.
func TestShardLeaveFreesItsShards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 4))
	require.Len(t, b.acquire(t, "A", 2), 2)
	require.Len(t, b.acquire(t, "B", 1), 1)
	_, alive, err := b.st.RenewShards(t.Context(), b.pool, "A", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, 1, alive)
	require.NoError(t, b.st.LeaveShards(t.Context(), b.pool, "A"))
	free, alive, err := b.st.LookShards(t.Context(), b.pool, "B", time.Minute)
	require.NoError(t, err)
	require.Equal(t, 3, free, "A's two and the one never taken; B keeps its own")
	require.Equal(t, 1, alive, "B looks: A left")
	_, alive, err = b.st.RenewShards(t.Context(), b.pool, "B", time.Minute, 0)
	require.NoError(t, err)
	require.Equal(t, 1, alive, "A is no longer a member")
}

// Draining one aggregate's backlog, each read touches about as many
// buffers at the end as at the start: the read's work is bounded by the
// batch, not by how much of the aggregate went before or waits behind. A
// read that walked the rows in flight, or probed every earlier row of the
// aggregate, grows with the drain and fails this whatever the machine's
// speed.
func TestShardReadWorkIsBoundedByTheBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.enableShards(t, 1))
	const backlog, batch = 4000, 100
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'account', 'busy', 'E', '{}' FROM generate_series(1, $1::int)`, backlog)
	b.exec(t, "ANALYZE {{table}}")
	a := b.acquire(t, "A", 1)
	lease := a[0].ShardLease

	var pos int64
	var inFlight []store.Row
	var first, last int
	for drained := 0; drained < backlog-2*batch; {
		work := b.readBuffers(t, lease, pos, batch)
		if first == 0 {
			first = work
		}
		last = work
		rows, _, err := b.st.ReadShards(t.Context(), b.pool, store.ShardReadParams{Owner: "A", Reads: []store.ShardRead{{ShardLease: lease, After: pos, Limit: batch}}, Ordered: true})
		require.NoError(t, err)
		require.Len(t, rows, batch)
		require.Equal(t, rows[0].ID-1, rows[0].Prev, "chained to the row before, in flight")
		pos = rows[len(rows)-1].ID
		// The batch before this one is finalized only now: while a read
		// runs, the previous batch is in flight, as in a dispatcher.
		if inFlight != nil {
			_, err = b.st.FinalizeShards(t.Context(), b.pool, "A", doneWrites(a, inFlight))
			require.NoError(t, err)
			drained += len(inFlight)
		}
		inFlight = rows
	}
	t.Logf("buffers per read: %d at the start, %d after %d messages", first, last, backlog-2*batch)
	require.Less(t, last, 2*first+50, "the read's work grew with the drain")
}

// readBuffers is how many buffers the shard read touches (shared hits and
// reads, inclusive of every node).
func (b *testBundle) readBuffers(t *testing.T, lease store.ShardLease, after int64, limit int32) int {
	t.Helper()
	lines := b.explainRead(t, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)", []int32{int32(lease.Shard)}, lease.Token, []int64{after}, limit)
	var plan []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal([]byte(strings.Join(lines, "\n")), &plan))
	return plan[0].Plan.Hit + plan[0].Plan.Read
}
