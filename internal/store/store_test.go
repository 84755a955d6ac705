package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

type testBundle struct {
	pool  *pgxpool.Pool
	st    *store.Store
	table string
}

// setup migrates an outbox table in a schema of the test's own.
func setup(t *testing.T) *testBundle {
	t.Helper()
	table := testdb.NewSchema(t) + ".outbox"
	st, err := store.New(table)
	require.NoError(t, err)
	pool := testdb.Pool(t)
	require.NoError(t, st.Migrate(t.Context(), pool))
	return &testBundle{pool: pool, st: st, table: table}
}

// msg is one row for enqueue: aggregate id and event type.
type msg struct{ agg, event string }

// enqueue inserts msgs with the producer statement and returns their ids.
func (b *testBundle) enqueue(t *testing.T, msgs ...msg) []int64 {
	t.Helper()
	args := make([]any, 0, store.InsertParams*len(msgs))
	for _, m := range msgs {
		args = append(args, "order", m.agg, m.event, `{"k":1}`, nil)
	}
	rows, err := b.pool.Query(t.Context(), b.st.InsertSQL(len(msgs)), args...)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, len(msgs))
	return ids
}

// enqueueN inserts n rows, each its own aggregate.
func (b *testBundle) enqueueN(t *testing.T, n int) []int64 {
	t.Helper()
	msgs := make([]msg, n)
	for i := range msgs {
		msgs[i] = msg{agg: fmt.Sprintf("agg-%d", i), event: "Created"}
	}
	return b.enqueue(t, msgs...)
}

// exec runs q with {{table}} replaced by the quoted table name.
func (b *testBundle) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), strings.ReplaceAll(q, "{{table}}", b.st.QuotedTable()), args...)
	require.NoError(t, err)
}

func (b *testBundle) claim(t *testing.T, p store.ClaimParams) []store.Row {
	t.Helper()
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 12
	}
	if p.Lease == 0 {
		p.Lease = time.Minute
	}
	if p.Batch == 0 {
		p.Batch = 10
	}
	rows, _, err := b.st.Claim(t.Context(), b.pool, p, nil)
	require.NoError(t, err)
	return rows
}

func (b *testBundle) finalize(t *testing.T, owner string, outcomes ...store.RowWrite) []bool {
	t.Helper()
	held, err := b.st.Finalize(t.Context(), b.pool, owner, outcomes)
	require.NoError(t, err)
	require.Len(t, held, len(outcomes))
	return held
}

// dbRow is a row as stored, every column the claim and finalize write.
type dbRow struct {
	ID           int64
	Status       string
	AvailableAt  time.Time
	Attempts     int
	LeaseOwner   *string
	LeaseUntil   *time.Time
	LeaseVersion int64
	LastError    *string
	DoneAt       *time.Time
}

func (b *testBundle) row(t *testing.T, id int64) dbRow {
	t.Helper()
	var r dbRow
	err := b.pool.QueryRow(t.Context(), `SELECT id, status, available_at, attempts, lease_owner,
		lease_until, lease_version, last_error, done_at FROM `+b.st.QuotedTable()+` WHERE id = $1`, id).
		Scan(&r.ID, &r.Status, &r.AvailableAt, &r.Attempts, &r.LeaseOwner, &r.LeaseUntil,
			&r.LeaseVersion, &r.LastError, &r.DoneAt)
	require.NoError(t, err)
	return r
}

// rowJSON is the whole stored row, every column, for before/after equality.
func (b *testBundle) rowJSON(t *testing.T, id int64) string {
	t.Helper()
	var s string
	err := b.pool.QueryRow(t.Context(), `SELECT to_jsonb(o)::text FROM `+b.st.QuotedTable()+` AS o WHERE id = $1`, id).Scan(&s)
	require.NoError(t, err)
	return s
}

func (b *testBundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT now()").Scan(&now))
	return now
}

// waitExpired polls until the database sees every lease on ids as expired.
func (b *testBundle) waitExpired(t *testing.T, ids ...int64) {
	t.Helper()
	q := `SELECT count(*) FROM ` + b.st.QuotedTable() + ` WHERE id = ANY($1) AND lease_until < now()`
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), q, ids).Scan(&n))
		return n == len(ids)
	}, 10*time.Second, 10*time.Millisecond)
}

// expireNow moves the leases on ids into the past: a crashed owner whose
// lease ran out, without waiting for it.
func (b *testBundle) expireNow(t *testing.T, ids ...int64) {
	t.Helper()
	b.exec(t, `UPDATE {{table}} SET lease_until = now() - interval '1 millisecond'
		WHERE status = 'processing' AND id = ANY($1)`, ids)
}

func rowIDs(rows []store.Row) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func sortedByID(rows []store.Row) bool {
	return slices.IsSortedFunc(rows, func(a, b store.Row) int { return int(a.ID - b.ID) })
}

// TestClaimConcurrentWorkersTakeEachRowOnce: 4 workers claiming 200 rows in
// batches of 7 until empty take exactly the 200 ids, none twice.
func TestClaimConcurrentWorkersTakeEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	want := b.enqueueN(t, 200)
	const workers, batch = 4, 7

	var (
		mu   sync.Mutex
		got  []int64
		errs []error
		wg   sync.WaitGroup
	)
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			owner := fmt.Sprintf("worker-%d", w)
			for {
				rows, _, err := b.st.Claim(t.Context(), b.pool, store.ClaimParams{
					Owner: owner, Batch: batch, Lease: time.Minute, MaxAttempts: 12,
				}, nil)
				mu.Lock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case len(rows) > batch:
					errs = append(errs, fmt.Errorf("%s claimed %d rows, batch is %d", owner, len(rows), batch))
				case !sortedByID(rows):
					errs = append(errs, fmt.Errorf("%s claimed rows out of id order: %v", owner, rowIDs(rows)))
				}
				got = append(got, rowIDs(rows)...)
				mu.Unlock()
				if err != nil || len(rows) == 0 {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, got, 200)
	slices.Sort(got)
	require.Equal(t, want, got, "every id exactly once")

	// A row claimed twice would carry lease_version 2 and attempts 2.
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+b.st.QuotedTable()+`
		WHERE status = 'processing' AND lease_version = 1 AND attempts = 1`).Scan(&n))
	require.Equal(t, 200, n)
}

// TestClaimCrashedWorkerLeaseExpiresAndStaleFinalizeIsFenced is the
// article's timeline: A's lease expires, B takes the row over with the next
// fencing token, and A's late finalize is rejected.
func TestClaimCrashedWorkerLeaseExpiresAndStaleFinalizeIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueueN(t, 1)

	aRows := b.claim(t, store.ClaimParams{Owner: "A", Lease: 200 * time.Millisecond})
	require.Len(t, aRows, 1)
	a := aRows[0]
	require.Equal(t, int64(1), a.LeaseVersion)
	require.Equal(t, 1, a.Attempts)

	require.Empty(t, b.claim(t, store.ClaimParams{Owner: "B", Lease: 30 * time.Second}), "lease still held")

	b.waitExpired(t, a.ID)
	bRows := b.claim(t, store.ClaimParams{Owner: "B", Lease: 30 * time.Second})
	require.Len(t, bRows, 1)
	bRow := bRows[0]
	require.Equal(t, a.ID, bRow.ID)
	require.Equal(t, a.LeaseVersion+1, bRow.LeaseVersion)
	require.Equal(t, 2, bRow.Attempts)

	before := b.rowJSON(t, a.ID)
	require.Equal(t, []bool{false}, b.finalize(t, "A", store.RowWrite{ID: a.ID, LeaseVersion: a.LeaseVersion, Status: store.StatusDone}))
	require.Equal(t, before, b.rowJSON(t, a.ID), "A's stale finalize wrote nothing")
	r := b.row(t, a.ID)
	require.Equal(t, store.StatusProcessing, r.Status)
	require.Equal(t, "B", *r.LeaseOwner)

	require.Equal(t, []bool{true}, b.finalize(t, "B", store.RowWrite{ID: bRow.ID, LeaseVersion: bRow.LeaseVersion, Status: store.StatusDone}))
	require.Equal(t, store.StatusDone, b.row(t, a.ID).Status)
}

// TestFinalizeExpiredLeaseNobodyTookSucceeds: correctness is decided by the
// generation, not the clock; an expired lease nobody took over still lets
// its owner record the result.
func TestFinalizeExpiredLeaseNobodyTookSucceeds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.enqueueN(t, 1)

	rows := b.claim(t, store.ClaimParams{Owner: "A", Lease: 50 * time.Millisecond})
	require.Len(t, rows, 1)
	b.waitExpired(t, rows[0].ID)

	require.Equal(t, []bool{true}, b.finalize(t, "A", store.RowWrite{ID: rows[0].ID, LeaseVersion: rows[0].LeaseVersion, Status: store.StatusDone}))
	r := b.row(t, rows[0].ID)
	require.Equal(t, store.StatusDone, r.Status)
	require.Equal(t, int64(1), r.LeaseVersion)
}

// TestClaimReapsRowThatNeverFinalizesAfterMaxAttempts: a message that kills
// its worker every time (claimed, never finalized) stops at the attempt
// limit: the next claim sends it to dead, and it is never claimed again.
func TestClaimReapsRowThatNeverFinalizesAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueueN(t, 1)[0]
	const maxAttempts = 3

	var last store.Row
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		rows := b.claim(t, store.ClaimParams{Owner: fmt.Sprintf("crasher-%d", attempt), Lease: 50 * time.Millisecond, MaxAttempts: maxAttempts})
		require.Len(t, rows, 1, "attempt %d", attempt)
		require.Equal(t, id, rows[0].ID)
		require.Equal(t, attempt, rows[0].Attempts)
		require.Equal(t, int64(attempt), rows[0].LeaseVersion)
		last = rows[0]
		b.waitExpired(t, id)
	}

	require.Empty(t, b.claim(t, store.ClaimParams{Owner: "reaper", MaxAttempts: maxAttempts}))
	r := b.row(t, id)
	require.Equal(t, store.StatusDead, r.Status)
	require.Equal(t, maxAttempts, r.Attempts)
	require.NotNil(t, r.LastError)
	require.Contains(t, *r.LastError, "lease")
	require.Nil(t, r.LeaseOwner)
	require.Nil(t, r.LeaseUntil)

	// The last owner, had it been only slow, learns that its lease is lost:
	// the row stays dead for an operator to look at.
	before := b.rowJSON(t, id)
	require.Equal(t, []bool{false}, b.finalize(t, "crasher-3", store.RowWrite{ID: id, LeaseVersion: last.LeaseVersion, Status: store.StatusDone}))
	require.Equal(t, before, b.rowJSON(t, id))

	// Not even a dispatcher with a larger budget takes a dead row.
	require.Empty(t, b.claim(t, store.ClaimParams{Owner: "other", MaxAttempts: 100}))
	require.Equal(t, store.StatusDead, b.row(t, id).Status)
}

// TestClaimOrdered: only the head of each aggregate is claimable; a dead
// head stops its aggregate until an operator skips or retries it.
func TestClaimOrdered(t *testing.T) {
	t.Parallel()

	type bundle struct {
		*testBundle
		x1, y1, x2, y2, x3 int64
	}
	setupOrdered := func(t *testing.T) *bundle {
		t.Helper()
		b := setup(t)
		ids := b.enqueue(t, msg{"X", "x1"}, msg{"Y", "y1"}, msg{"X", "x2"}, msg{"Y", "y2"}, msg{"X", "x3"})
		return &bundle{testBundle: b, x1: ids[0], y1: ids[1], x2: ids[2], y2: ids[3], x3: ids[4]}
	}
	ordered := store.ClaimParams{Owner: "w", Ordered: true}
	done := func(r store.Row) store.RowWrite {
		return store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDone}
	}
	dead := func(r store.Row) store.RowWrite {
		return store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDead, Error: "400 bad request"}
	}

	t.Run("HeadsOnlyThenNext", func(t *testing.T) {
		t.Parallel()
		b := setupOrdered(t)
		heads := b.claim(t, ordered)
		require.Equal(t, []int64{b.x1, b.y1}, rowIDs(heads))
		require.Empty(t, b.claim(t, ordered), "followers wait while their heads are processing")

		require.Equal(t, []bool{true}, b.finalize(t, "w", done(heads[0])))
		next := b.claim(t, ordered)
		require.Equal(t, []int64{b.x2}, rowIDs(next))

		require.Equal(t, []bool{true, true}, b.finalize(t, "w", done(heads[1]), done(next[0])))
		require.Equal(t, []int64{b.y2, b.x3}, rowIDs(b.claim(t, ordered)))
	})

	t.Run("ExpiredHeadIsReclaimedBeforeFollowers", func(t *testing.T) {
		t.Parallel()
		b := setupOrdered(t)
		heads := b.claim(t, ordered)
		require.Equal(t, []int64{b.x1, b.y1}, rowIDs(heads))
		b.expireNow(t, b.x1)
		again := b.claim(t, store.ClaimParams{Owner: "w2", Ordered: true})
		require.Equal(t, []int64{b.x1}, rowIDs(again))
		require.Equal(t, 2, again[0].Attempts)
	})

	deadHead := func(t *testing.T) *bundle {
		t.Helper()
		b := setupOrdered(t)
		heads := b.claim(t, ordered)
		require.Equal(t, []int64{b.x1, b.y1}, rowIDs(heads))
		require.Equal(t, []bool{true, true}, b.finalize(t, "w", dead(heads[0]), done(heads[1])))
		require.Equal(t, []int64{b.y2}, rowIDs(b.claim(t, ordered)), "Y goes on, X is stuck")
		for range 2 {
			require.Empty(t, b.claim(t, ordered), "no row of X is claimable behind its dead head")
		}
		require.Equal(t, store.StatusPending, b.row(t, b.x2).Status)
		// Unordered dispatchers are not held back.
		require.Equal(t, []int64{b.x2, b.x3}, rowIDs(b.claim(t, store.ClaimParams{Owner: "u"})))
		b.exec(t, `UPDATE {{table}} SET status = 'pending', lease_owner = NULL, lease_until = NULL WHERE id = ANY($1)`,
			[]int64{b.x2, b.x3})
		return b
	}

	t.Run("DeadHeadBlocksUntilSkipped", func(t *testing.T) {
		t.Parallel()
		b := deadHead(t)
		skipped, err := b.st.DeadSkip(t.Context(), b.pool, []int64{b.x1})
		require.NoError(t, err)
		require.Equal(t, []int64{b.x1}, skipped)
		r := b.row(t, b.x1)
		require.Equal(t, store.StatusDone, r.Status)
		require.NotNil(t, r.DoneAt)
		require.Equal(t, "400 bad request", *r.LastError, "the reason it was skipped is kept")
		require.Equal(t, []int64{b.x2}, rowIDs(b.claim(t, ordered)))
	})

	t.Run("DeadHeadBlocksUntilRetried", func(t *testing.T) {
		t.Parallel()
		b := deadHead(t)
		retried, err := b.st.DeadRetry(t.Context(), b.pool, []int64{b.x1}, "unused_channel")
		require.NoError(t, err)
		require.Equal(t, []int64{b.x1}, retried)
		head := b.claim(t, ordered)
		require.Equal(t, []int64{b.x1}, rowIDs(head), "the head again, not its followers")
		require.Equal(t, 1, head[0].Attempts, "a fresh attempt budget")
		require.Empty(t, b.claim(t, ordered))
		require.Equal(t, []bool{true}, b.finalize(t, "w", done(head[0])))
		require.Equal(t, []int64{b.x2}, rowIDs(b.claim(t, ordered)))
	})

	t.Run("SkipAndRetryTouchOnlyDeadRows", func(t *testing.T) {
		t.Parallel()
		b := setupOrdered(t)
		skipped, err := b.st.DeadSkip(t.Context(), b.pool, []int64{b.x1, b.y1})
		require.NoError(t, err)
		require.Empty(t, skipped)
		retried, err := b.st.DeadRetry(t.Context(), b.pool, nil, "unused_channel")
		require.NoError(t, err)
		require.Empty(t, retried)
		require.Equal(t, store.StatusPending, b.row(t, b.x1).Status)
	})
}

// outcomeKinds are every fenced write the dispatcher makes.
var outcomeKinds = []struct {
	name    string
	outcome store.RowWrite
}{
	{"Done", store.RowWrite{Status: store.StatusDone}},
	{"Retry", store.RowWrite{Status: store.StatusPending, Delay: 5 * time.Second, Error: "timeout"}},
	{"Defer", store.RowWrite{Status: store.StatusPending, Delay: time.Minute, Refund: true, Error: "deferred: account missing"}},
	{"Dead", store.RowWrite{Status: store.StatusDead, Error: "400 bad request"}},
	{"Release", store.RowWrite{Status: store.StatusPending, Refund: true}},
}

// TestFinalizeRejectsStaleFence: every kind of fenced write is refused, and
// changes nothing, for a previous lease_version, for another owner holding
// the right version, and for a row already finalized.
func TestFinalizeRejectsStaleFence(t *testing.T) {
	t.Parallel()
	for _, kind := range outcomeKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			id := b.enqueueN(t, 1)[0]
			with := func(version int64) store.RowWrite {
				o := kind.outcome
				o.ID, o.LeaseVersion = id, version
				return o
			}

			old := b.claim(t, store.ClaimParams{Owner: "A"})
			require.Len(t, old, 1)
			b.expireNow(t, id)
			cur := b.claim(t, store.ClaimParams{Owner: "B"})
			require.Len(t, cur, 1)
			require.Equal(t, old[0].LeaseVersion+1, cur[0].LeaseVersion)

			before := b.rowJSON(t, id)
			require.Equal(t, []bool{false}, b.finalize(t, "A", with(old[0].LeaseVersion)), "previous version")
			require.Equal(t, before, b.rowJSON(t, id))
			require.Equal(t, []bool{false}, b.finalize(t, "B", with(old[0].LeaseVersion)), "previous version, current owner")
			require.Equal(t, before, b.rowJSON(t, id))
			require.Equal(t, []bool{false}, b.finalize(t, "C", with(cur[0].LeaseVersion)), "right version, other owner")
			require.Equal(t, before, b.rowJSON(t, id))

			require.Equal(t, []bool{true}, b.finalize(t, "B", with(cur[0].LeaseVersion)))
			after := b.rowJSON(t, id)
			require.NotEqual(t, before, after)
			require.Equal(t, kind.outcome.Status, b.row(t, id).Status)

			require.Equal(t, []bool{false}, b.finalize(t, "B", with(cur[0].LeaseVersion)), "already finalized")
			require.Equal(t, after, b.rowJSON(t, id))
		})
	}
}

// TestFinalizeMixedBatch applies every kind of outcome in one statement and
// checks each row's columns, and that the fences reported are aligned with
// the input when some hold and some do not.
func TestFinalizeMixedBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 6)
	b.exec(t, `UPDATE {{table}} SET last_error = 'earlier failure' WHERE id = ANY($1)`, []int64{ids[0], ids[4]})
	rows := b.claim(t, store.ClaimParams{Owner: "A", Batch: 6})
	require.Equal(t, ids, rowIDs(rows))
	// ids[5] is taken over by B: A's outcome for it must not hold.
	b.expireNow(t, ids[5])
	stolen := b.claim(t, store.ClaimParams{Owner: "B"})
	require.Equal(t, []int64{ids[5]}, rowIDs(stolen))
	stolenBefore := b.rowJSON(t, ids[5])

	// A rune of 3 bytes straddles byte 500, so a byte cut there would split it.
	long := "x" + strings.Repeat("日", 300)
	v := rows[0].LeaseVersion
	outcomes := []store.RowWrite{
		{ID: ids[3], LeaseVersion: v, Status: store.StatusDead, Error: long},
		{ID: ids[5], LeaseVersion: v, Status: store.StatusDone},
		{ID: ids[0], LeaseVersion: v, Status: store.StatusDone, Error: "ignored for done"},
		{ID: ids[1], LeaseVersion: v, Status: store.StatusPending, Delay: 5 * time.Second, Error: "timeout"},
		{ID: ids[2], LeaseVersion: v, Status: store.StatusPending, Delay: 2 * time.Minute, Refund: true, Error: "deferred: no account"},
		{ID: ids[4], LeaseVersion: v, Status: store.StatusPending, Refund: true},
	}
	t0 := b.dbNow(t)
	held := b.finalize(t, "A", outcomes...)
	t1 := b.dbNow(t)
	require.Equal(t, []bool{true, false, true, true, true, true}, held)

	between := func(got, lo, hi time.Time, what string) {
		t.Helper()
		require.False(t, got.Before(lo), "%s: %s before %s", what, got, lo)
		require.False(t, got.After(hi), "%s: %s after %s", what, got, hi)
	}
	noLease := func(r dbRow) {
		t.Helper()
		require.Nil(t, r.LeaseOwner)
		require.Nil(t, r.LeaseUntil)
		require.Equal(t, int64(1), r.LeaseVersion, "finalize never changes the fencing token")
	}

	doneRow := b.row(t, ids[0])
	require.Equal(t, store.StatusDone, doneRow.Status)
	require.NotNil(t, doneRow.DoneAt)
	between(*doneRow.DoneAt, t0, t1, "done_at")
	require.Nil(t, doneRow.LastError)
	require.Equal(t, 1, doneRow.Attempts)
	noLease(doneRow)

	retry := b.row(t, ids[1])
	require.Equal(t, store.StatusPending, retry.Status)
	require.Equal(t, 1, retry.Attempts, "a retry spends the attempt")
	between(retry.AvailableAt, t0.Add(5*time.Second), t1.Add(5*time.Second), "retry available_at")
	require.Equal(t, "timeout", *retry.LastError)
	require.Nil(t, retry.DoneAt)
	noLease(retry)

	deferred := b.row(t, ids[2])
	require.Equal(t, store.StatusPending, deferred.Status)
	require.Equal(t, 0, deferred.Attempts, "a defer refunds the attempt")
	between(deferred.AvailableAt, t0.Add(2*time.Minute), t1.Add(2*time.Minute), "defer available_at")
	require.Equal(t, "deferred: no account", *deferred.LastError)
	noLease(deferred)

	deadRow := b.row(t, ids[3])
	require.Equal(t, store.StatusDead, deadRow.Status)
	require.Equal(t, 1, deadRow.Attempts)
	require.Nil(t, deadRow.DoneAt)
	require.NotNil(t, deadRow.LastError)
	require.LessOrEqual(t, len(*deadRow.LastError), 500, "stored error is at most 500 bytes")
	require.True(t, utf8.ValidString(*deadRow.LastError))
	kept := strings.TrimSuffix(*deadRow.LastError, "…")
	require.True(t, strings.HasPrefix(long, kept), "a prefix of the original error")
	require.Greater(t, len(kept), 490, "cut near the limit, not far before it")
	noLease(deadRow)

	released := b.row(t, ids[4])
	require.Equal(t, store.StatusPending, released.Status)
	require.Equal(t, 0, released.Attempts, "a release refunds the attempt")
	between(released.AvailableAt, t0, t1, "release available_at")
	require.Equal(t, "earlier failure", *released.LastError, "an empty error keeps the previous one")
	noLease(released)

	require.Equal(t, stolenBefore, b.rowJSON(t, ids[5]), "the row B holds is untouched")
}

// TestFinalizeTruncatesErrors: a stored error is at most 500 bytes, valid
// UTF-8 and, when cut, a prefix of the original marked with an ellipsis.
func TestFinalizeTruncatesErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		name string
		in   string
		cut  bool
	}{
		{"Short", "boom", false},
		{"Exactly500", strings.Repeat("é", 250), false},
		{"ASCII501", strings.Repeat("a", 501), true},
		{"TwoByteRunes", "a" + strings.Repeat("é", 300), true},
		{"ThreeByteRunes", strings.Repeat("日", 200), true},
		{"FourByteRunes", "ab" + strings.Repeat("🙂", 200), true},
	} {
		id := b.enqueueN(t, 1)[0]
		rows := b.claim(t, store.ClaimParams{Owner: "A"})
		require.Equal(t, []int64{id}, rowIDs(rows), tc.name)
		require.Equal(t, []bool{true}, b.finalize(t, "A", store.RowWrite{ID: id, LeaseVersion: rows[0].LeaseVersion, Status: store.StatusDead, Error: tc.in}))
		got := *b.row(t, id).LastError
		if !tc.cut {
			require.Equal(t, tc.in, got, tc.name)
			continue
		}
		require.LessOrEqual(t, len(got), 500, tc.name)
		require.True(t, utf8.ValidString(got), tc.name)
		kept, marked := strings.CutSuffix(got, "…")
		require.True(t, marked, tc.name)
		require.True(t, strings.HasPrefix(tc.in, kept), tc.name)
		require.Greater(t, len(kept), 500-len("…")-utf8.UTFMax, "%s: cut at the limit, not before it", tc.name)
	}
}

// TestClaimOrderAndBatching: claims come back sorted by id and at most
// Batch long, never take rows scheduled for later, and take expired leases
// before new pending rows.
func TestClaimOrderAndBatching(t *testing.T) {
	t.Parallel()

	t.Run("SortedAndBounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.enqueueN(t, 20)
		// The claim takes the longest-waiting rows first: the highest ids here.
		b.exec(t, `UPDATE {{table}} SET available_at = now() - id * interval '1 second'`)
		first := b.claim(t, store.ClaimParams{Owner: "w", Batch: 5})
		require.Equal(t, ids[15:], rowIDs(first))
		var all []int64
		all = append(all, rowIDs(first)...)
		for {
			rows := b.claim(t, store.ClaimParams{Owner: "w", Batch: 5})
			if len(rows) == 0 {
				break
			}
			require.LessOrEqual(t, len(rows), 5)
			require.True(t, sortedByID(rows), "%v", rowIDs(rows))
			all = append(all, rowIDs(rows)...)
		}
		slices.Sort(all)
		require.Equal(t, ids, all)
	})

	t.Run("FutureRowsWait", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.enqueueN(t, 4)
		b.exec(t, `UPDATE {{table}} SET available_at = now() + interval '1 hour' WHERE id = ANY($1)`, []int64{ids[0], ids[2]})
		require.Equal(t, []int64{ids[1], ids[3]}, rowIDs(b.claim(t, store.ClaimParams{Owner: "w"})))
		require.Empty(t, b.claim(t, store.ClaimParams{Owner: "w"}))
		b.exec(t, `UPDATE {{table}} SET available_at = now() - interval '1 millisecond' WHERE id = $1`, ids[2])
		require.Equal(t, []int64{ids[2]}, rowIDs(b.claim(t, store.ClaimParams{Owner: "w"})))
	})

	t.Run("ExpiredLeasesFirst", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.enqueueN(t, 6)
		// ids[3:] were claimed by a worker that crashed; their leases
		// expired at different times.
		b.exec(t, `UPDATE {{table}} SET status = 'processing', lease_owner = 'crashed', lease_version = 1,
			attempts = 1, lease_until = now() - CASE id WHEN $1 THEN interval '3 s' WHEN $2 THEN interval '1 s'
			ELSE interval '2 s' END WHERE id = ANY($3)`, ids[3], ids[4], ids[3:])

		// The two oldest expired leases outrank every pending row.
		got := b.claim(t, store.ClaimParams{Owner: "w", Batch: 2})
		require.Equal(t, []int64{ids[3], ids[5]}, rowIDs(got))
		for _, r := range got {
			require.Equal(t, int64(2), r.LeaseVersion)
			require.Equal(t, 2, r.Attempts)
		}
		// The rest of the batch is filled from pending rows.
		got = b.claim(t, store.ClaimParams{Owner: "w", Batch: 3})
		require.Equal(t, []int64{ids[0], ids[1], ids[4]}, rowIDs(got))
	})
}

// TestUndelivered: true while anything awaits delivery; with ordered, rows
// stuck behind a dead head do not count, since no claim can take them.
func TestUndelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	undelivered := func(ordered bool) bool {
		t.Helper()
		got, err := b.st.Undelivered(t.Context(), b.pool, ordered)
		require.NoError(t, err)
		return got
	}
	require.False(t, undelivered(false), "empty table")
	require.False(t, undelivered(true), "empty table")

	ids := b.enqueue(t, msg{"X", "x1"}, msg{"X", "x2"}, msg{"Y", "y1"})
	b.exec(t, `UPDATE {{table}} SET available_at = now() + interval '1 hour'`)
	require.True(t, undelivered(false), "pending, even if scheduled for later")
	require.True(t, undelivered(true))

	b.exec(t, `UPDATE {{table}} SET status = 'processing', lease_until = now() + interval '1 minute', lease_owner = 'w' WHERE id = $1`, ids[0])
	b.exec(t, `UPDATE {{table}} SET status = 'done', done_at = now() WHERE id <> $1`, ids[0])
	require.True(t, undelivered(false), "processing")
	require.True(t, undelivered(true), "processing")

	b.exec(t, `UPDATE {{table}} SET status = 'dead', lease_owner = NULL, lease_until = NULL WHERE id = $1`, ids[0])
	require.False(t, undelivered(false), "only done and dead rows")
	require.False(t, undelivered(true), "only done and dead rows")

	b.exec(t, `UPDATE {{table}} SET status = 'pending', done_at = NULL WHERE id = $1`, ids[1])
	require.True(t, undelivered(false), "x2 is pending")
	require.False(t, undelivered(true), "x2 is stuck behind the dead x1")

	b.exec(t, `UPDATE {{table}} SET status = 'pending', done_at = NULL WHERE id = $1`, ids[2])
	require.True(t, undelivered(true), "y1 is deliverable")
}

// TestStatus checks every figure against rows written directly.
func TestStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)

	st, err := b.st.Status(t.Context(), b.pool)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 0, "dead": 0}, st.Counts)
	require.Equal(t, time.Duration(-1), st.OldestPendingAge)
	require.Zero(t, st.ExpiredLeases)
	require.Empty(t, st.Attempts)

	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload,
		status, attempts, lease_owner, lease_until, lease_version, created_at, done_at) VALUES
		('o', 'a', 'e', '{}', 'pending',    0, NULL, NULL, 0, now() - interval '10 minutes', NULL),
		('o', 'b', 'e', '{}', 'pending',    0, NULL, NULL, 0, now() - interval '1 minute', NULL),
		('o', 'c', 'e', '{}', 'pending',    2, NULL, NULL, 2, now(), NULL),
		('o', 'd', 'e', '{}', 'processing', 1, 'w', now() - interval '1 second', 1, now(), NULL),
		('o', 'e', 'e', '{}', 'processing', 3, 'w', now() + interval '1 minute', 3, now(), NULL),
		('o', 'f', 'e', '{}', 'done',       1, NULL, NULL, 1, now() - interval '1 day', now()),
		('o', 'g', 'e', '{}', 'done',       1, NULL, NULL, 1, now() - interval '1 day', now()),
		('o', 'h', 'e', '{}', 'dead',       5, NULL, NULL, 5, now() - interval '1 day', NULL)`)

	st, err = b.st.Status(t.Context(), b.pool)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 3, "processing": 2, "done": 2, "dead": 1}, st.Counts)
	require.GreaterOrEqual(t, st.OldestPendingAge, 10*time.Minute, "done and dead rows are not undelivered")
	require.Less(t, st.OldestPendingAge, 11*time.Minute)
	require.Equal(t, int64(1), st.ExpiredLeases)
	require.Equal(t, map[int]int64{0: 2, 1: 1, 2: 1, 3: 1}, st.Attempts, "pending and processing rows only")

	// A processing row older than every pending one sets the age.
	b.exec(t, `UPDATE {{table}} SET created_at = now() - interval '1 hour' WHERE aggregate_id = 'e'`)
	st, err = b.st.Status(t.Context(), b.pool)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.OldestPendingAge, time.Hour)
	require.Less(t, st.OldestPendingAge, time.Hour+time.Minute)
}

// TestPurgeBatch deletes only done rows older than the cutoff, a bounded
// batch at a time, with a cursor that moves forward.
func TestPurgeBatch(t *testing.T) {
	t.Parallel()

	setupPurge := func(t *testing.T) (*testBundle, []int64, []int64) {
		t.Helper()
		b := setup(t)
		ids := b.enqueueN(t, 16)
		var old, keep []int64
		for i, id := range ids {
			switch i % 4 {
			case 0, 1:
				old = append(old, id)
			default:
				keep = append(keep, id)
			}
		}
		// Of the rows kept: done recently, dead long ago, pending long ago.
		b.exec(t, `UPDATE {{table}} SET status = 'done', done_at = now() - interval '2 hours' WHERE id = ANY($1)`, old)
		b.exec(t, `UPDATE {{table}} SET created_at = now() - interval '1 day'`)
		b.exec(t, `UPDATE {{table}} SET status = CASE id % 3 WHEN 0 THEN 'done' WHEN 1 THEN 'dead' ELSE 'pending' END,
			done_at = CASE id % 3 WHEN 0 THEN now() END WHERE id = ANY($1)`, keep)
		return b, old, keep
	}
	remaining := func(t *testing.T, b *testBundle) []int64 {
		t.Helper()
		rows, err := b.pool.Query(t.Context(), `SELECT id FROM `+b.st.QuotedTable()+` ORDER BY id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		return ids
	}

	t.Run("BatchesWithCursor", func(t *testing.T) {
		t.Parallel()
		b, old, keep := setupPurge(t)
		oldDoneAt := *b.row(t, old[0]).DoneAt
		var cursor store.PurgeCursor
		var total int64
		var batches int
		for {
			n, next, err := b.st.PurgeBatch(t.Context(), b.pool, time.Hour, cursor, 3)
			require.NoError(t, err)
			if n == 0 {
				require.Equal(t, cursor, next, "an empty batch leaves the cursor")
				break
			}
			require.LessOrEqual(t, n, int64(3))
			require.Greater(t, next.ID, cursor.ID)
			batches++
			total += n
			// The old rows share one done_at, so they go in id order.
			require.Equal(t, old[min(int(total), len(old))-1], next.ID, "cursor is the last row deleted")
			require.True(t, oldDoneAt.Equal(next.DoneAt), "cursor is the last row's done_at")
			cursor = next
		}
		require.Equal(t, int64(len(old)), total)
		require.Equal(t, 3, batches)
		require.Equal(t, keep, remaining(t, b))
	})

	t.Run("StartsAfterCursor", func(t *testing.T) {
		t.Parallel()
		b, old, keep := setupPurge(t)
		after := store.PurgeCursor{DoneAt: *b.row(t, old[3]).DoneAt, ID: old[3]}
		n, next, err := b.st.PurgeBatch(t.Context(), b.pool, time.Hour, after, 100)
		require.NoError(t, err)
		require.Equal(t, int64(len(old)-4), n)
		require.Equal(t, old[len(old)-1], next.ID)
		want := append(slices.Clone(old[:4]), keep...)
		slices.Sort(want)
		require.Equal(t, want, remaining(t, b))
	})

	t.Run("CutoffKeepsRecentRows", func(t *testing.T) {
		t.Parallel()
		b, _, _ := setupPurge(t)
		before := remaining(t, b)
		n, next, err := b.st.PurgeBatch(t.Context(), b.pool, 3*time.Hour, store.PurgeCursor{}, 100)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Zero(t, next)
		require.Equal(t, before, remaining(t, b))
	})
}

func TestParseTable(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		in           string
		schema, name string
	}{
		{"outbox", "", "outbox"},
		{"app.outbox", "app", "outbox"},
		{`x"; DROP TABLE y; --`, "", `x"; DROP TABLE y; --`},
		{`it's "quoted"`, "", `it's "quoted"`},
		{" with spaces ", "", " with spaces "},
		{"送信箱_ünï", "", "送信箱_ünï"},
		{`we"ird.na me`, `we"ird`, "na me"},
		{strings.Repeat("n", 40), "", strings.Repeat("n", 40)},
		{strings.Repeat("s", 63) + ".t", strings.Repeat("s", 63), "t"},
	} {
		got, err := store.ParseTable(tc.in)
		require.NoError(t, err, "%q", tc.in)
		require.Equal(t, store.Table{Schema: tc.schema, Name: tc.name}, got, "%q", tc.in)
		require.Equal(t, tc.in, got.String())
	}

	for _, in := range []string{
		"",
		"a.b.c",
		".x",
		"x.",
		".",
		strings.Repeat("n", 41),
		strings.Repeat("表", 14), // 42 bytes
		strings.Repeat("s", 64) + ".t",
		"bad\xffutf8",
		"nul\x00byte",
	} {
		_, err := store.ParseTable(in)
		require.Error(t, err, "%q", in)
		_, err = store.New(in)
		require.Error(t, err, "%q", in)
	}

	st, err := store.New(`sch"ema.x"; DROP TABLE y; --`)
	require.NoError(t, err)
	require.Equal(t, `"sch""ema"."x""; DROP TABLE y; --"`, st.QuotedTable())
}

// TestHostileTableNames runs every statement against tables whose names
// would break or inject into SQL if spliced unquoted, and checks that a
// bystander table survives.
func TestHostileTableNames(t *testing.T) {
	t.Parallel()

	names := []string{
		`x"; DROP TABLE y; --`,
		`Robert'); DROP TABLE y;--`,
		`it's "quoted"`,
		" with  spaces ",
		"送信箱_ünïcode",
		"dollar$$; DROP TABLE y; --",
		"tmpl{{ordered_guard}}",
		"tmpl{{table}}",
		"UPPER case",
	}
	for _, name := range names {
		t.Run("Unqualified/"+name, func(t *testing.T) {
			t.Parallel()
			schema := testdb.NewSchema(t)
			hostileEndToEnd(t, searchPathPool(t, schema), schema, name, name)
		})
		t.Run("Qualified/"+name, func(t *testing.T) {
			t.Parallel()
			schema := testdb.NewSchema(t)
			hostileEndToEnd(t, searchPathPool(t, schema), schema, name, schema+"."+name)
		})
	}
	t.Run("HostileSchema", func(t *testing.T) {
		t.Parallel()
		bystander := testdb.NewSchema(t)
		pool := searchPathPool(t, bystander)
		hostile := `s"; DROP TABLE y; -- ` + bystander
		dropSchemaAtCleanup(t, hostile)
		hostileEndToEnd(t, pool, hostile, "a b", hostile+".a b")
	})
}

// dropSchemaAtCleanup drops a schema that Migrate creates, which testdb
// does not know about.
func dropSchemaAtCleanup(t *testing.T, schema string) {
	t.Helper()
	pool := testdb.Pool(t)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
}

// TestMigrateRejectsChannelOverNameLimit: the wake-up channel is
// "schema.name", and PostgreSQL refuses channel names over 63 bytes; a table
// past that would fail every producer INSERT while a dispatcher waits, so
// Migrate and Resolve refuse it up front.
func TestMigrateRejectsChannelOverNameLimit(t *testing.T) {
	t.Parallel()
	name := strings.Repeat("n", 40)
	// The schema name is unique per test: its own prefix, then the name of
	// a throwaway testdb schema, padded to the wanted length.
	schemaOf := func(t *testing.T, n int) string {
		t.Helper()
		s := "c_" + testdb.NewSchema(t)
		s += strings.Repeat("p", n-len(s))
		dropSchemaAtCleanup(t, s)
		return s
	}

	t.Run("At63Bytes", func(t *testing.T) {
		t.Parallel()
		bystander := testdb.NewSchema(t)
		schema := schemaOf(t, 63-1-len(name))
		hostileEndToEnd(t, searchPathPool(t, bystander), schema, name, schema+"."+name)
	})

	t.Run("Over63Bytes", func(t *testing.T) {
		t.Parallel()
		schema := schemaOf(t, 64-1-len(name))
		pool := testdb.Pool(t)
		_, err := pool.Exec(t.Context(), "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
		require.NoError(t, err)
		st, err := store.New(schema + "." + name)
		require.NoError(t, err)
		err = st.Migrate(t.Context(), pool)
		require.ErrorContains(t, err, "channel")
		_, err = st.Resolve(t.Context(), pool)
		require.ErrorIs(t, err, store.ErrTableMissing, "migrate created nothing")

		// A table made some other way is refused when the dispatcher or the
		// admin resolves it.
		_, err = pool.Exec(t.Context(), "CREATE TABLE "+st.QuotedTable()+" (id int)")
		require.NoError(t, err)
		_, err = st.Resolve(t.Context(), pool)
		require.ErrorContains(t, err, "channel")
	})
}

// searchPathPool is a pool whose unqualified names resolve in schema, so
// that an injected "DROP TABLE y" would find the bystander table there.
func searchPathPool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func hostileEndToEnd(t *testing.T, pool *pgxpool.Pool, schema, name, table string) {
	t.Helper()
	ctx := t.Context()
	_, err := pool.Exec(ctx, "CREATE TABLE y (v int)")
	require.NoError(t, err)

	st, err := store.New(table)
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx, pool))
	require.NoError(t, st.Migrate(ctx, pool), "migrate is idempotent")

	got, err := st.Resolve(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, schema, got.Schema)
	require.Equal(t, name, got.Name)
	require.Equal(t, schema+"."+name, got.Channel())

	rows, err := pool.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = $2`, schema, name)
	require.NoError(t, err)
	indexes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{name + "_aggregate_head", name + "_dead", name + "_done", name + "_leased", name + "_pkey", name + "_ready"}, indexes)
	var audit bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL",
		pgx.Identifier{schema, name + "_audit"}.Sanitize()).Scan(&audit))
	require.True(t, audit, "the audit table is created next to the outbox")

	// The wake-up trigger notifies on "schema.name" while a dispatcher waits.
	channel := schema + "." + name
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	defer func() {
		_, err := listener.Exec(context.WithoutCancel(ctx), "UNLISTEN *")
		require.NoError(t, err)
	}()
	require.NoError(t, st.Wait(ctx, pool, "w", time.Minute))

	ins, err := pool.Query(ctx, st.InsertSQL(3), "o", "A", "e1", `{}`, nil, "o", "A", "e2", `{}`, nil, "o", "B", "e3", `{}`, nil)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(ins, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 3)

	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(nctx)
	require.NoError(t, err)
	require.Equal(t, channel, n.Channel)
	require.NoError(t, st.Unwait(ctx, pool, "w"))

	more, err := st.Undelivered(ctx, pool, true)
	require.NoError(t, err)
	require.True(t, more)

	claimed, _, err := st.Claim(ctx, pool, store.ClaimParams{Owner: "w", Batch: 10, Lease: time.Minute, MaxAttempts: 3, Ordered: true, ClearWait: true}, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0], ids[2]}, rowIDs(claimed))
	held, err := st.Finalize(ctx, pool, "w", []store.RowWrite{
		{ID: ids[0], LeaseVersion: 1, Status: store.StatusDone},
		{ID: ids[2], LeaseVersion: 1, Status: store.StatusDead, Error: `it's "broken"; DROP TABLE y; --`},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, held)

	claimed, _, err = st.Claim(ctx, pool, store.ClaimParams{Owner: "w", Batch: 10, Lease: time.Minute, MaxAttempts: 3}, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, rowIDs(claimed))
	held, err = st.Finalize(ctx, pool, "w", []store.RowWrite{{ID: ids[1], LeaseVersion: 1, Status: store.StatusDone}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, held)

	status, err := st.Status(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 2, "dead": 1}, status.Counts)

	deadRows, err := st.DeadList(ctx, pool, 0, 10)
	require.NoError(t, err)
	require.Len(t, deadRows, 1)
	require.Equal(t, `it's "broken"; DROP TABLE y; --`, deadRows[0].LastError)
	retried, err := st.DeadRetry(ctx, pool, nil, channel)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2]}, retried)

	purged, _, err := st.PurgeBatch(ctx, pool, 0, store.PurgeCursor{}, 10)
	require.NoError(t, err)
	require.Equal(t, int64(2), purged)

	var bystander bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_regclass('y') IS NOT NULL`).Scan(&bystander))
	require.True(t, bystander, "the bystander table y still exists")
}

// A retention pass reads about as many rows as it deletes, however many
// done rows are still too young to go and however many pending or dead
// rows the table holds: its cost follows what it deletes, not the table.
func TestPurgeCostFollowsDeletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	// 20,000 done rows, every 100th finished long ago, among 2,000 dead and
	// 2,000 pending ones.
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, attempts, done_at)
		SELECT 'order', 'order-' || g, 'E', '{}'::jsonb, 'done', 1,
		       CASE WHEN g % 100 = 0 THEN now() - interval '2 hours' ELSE now() END
		FROM generate_series(1, 20000) AS g`)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT 'order', 'order-' || g, 'E', '{}'::jsonb, CASE WHEN g % 2 = 0 THEN 'dead' ELSE 'pending' END
		FROM generate_series(1, 4000) AS g`)
	b.exec(t, "ANALYZE {{table}}")

	// One pass as Admin.Purge runs it, batches of 50 until one deletes
	// fewer; each batch is first run under EXPLAIN ANALYZE and rolled back,
	// to count the rows it reads.
	const batch = 50
	var deleted, examined int64
	cursor := store.PurgeCursor{DoneAt: time.Unix(0, 0)} // before every row, as the zero cursor
	for {
		_, plan := explainAnalyze(t, b, b.st.PurgeSQL(), fmt.Sprintf("%d, '%s', %d, %d",
			time.Hour.Microseconds(), cursor.DoneAt.Format(time.RFC3339Nano), cursor.ID, batch))
		plan.walk(func(n *planNode) {
			if n.RelationName == b.st.Table.Name {
				examined += int64((n.ActualRows + n.RemovedByFilter) * max(n.ActualLoops, 1))
			}
		})
		n, next, err := b.st.PurgeBatch(ctx, b.pool, time.Hour, cursor, batch)
		require.NoError(t, err)
		deleted += n
		if n < batch {
			break
		}
		cursor = next
	}
	require.Equal(t, int64(200), deleted)
	t.Logf("one retention pass deleted %d rows and read %d", deleted, examined)
	require.Less(t, examined, 4*deleted+100, "the pass read the rows it did not delete")
}

// Blocked aggregates are those whose oldest unfinished message is dead,
// with pending messages behind it; a dead message behind a pending head
// blocks nothing yet.
func TestBlockedAggregates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueue(t, msg{"a", "E"}, msg{"a", "E"}, msg{"a", "E"}, // dead head, two behind
		msg{"b", "E"}, msg{"b", "E"}, msg{"b", "E"}, // pending head, then dead, then pending
		msg{"c", "E"}, msg{"c", "E"}) // done, then dead head with nothing behind
	for _, id := range []int64{ids[0], ids[4], ids[7]} {
		b.exec(t, `UPDATE {{table}} SET status = 'dead' WHERE id = $1`, id)
	}
	b.exec(t, `UPDATE {{table}} SET status = 'done' WHERE id = $1`, ids[6])
	got, err := b.st.BlockedAggregates(t.Context(), b.pool, 10)
	require.NoError(t, err)
	require.Equal(t, store.Blocked{Aggregates: 1, Messages: 2,
		List: []store.BlockedAggregate{{AggregateID: "a", DeadID: ids[0], Waiting: 2}}}, got)

	b.exec(t, `UPDATE {{table}} SET status = 'done' WHERE id = $1`, ids[3]) // b's head delivered: now blocked
	got, err = b.st.BlockedAggregates(t.Context(), b.pool, 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Aggregates)
	require.EqualValues(t, 3, got.Messages)
	require.Equal(t, []store.BlockedAggregate{{AggregateID: "a", DeadID: ids[0], Waiting: 2}}, got.List, "the oldest dead head first, up to the limit")
}

// An unordered claim starts after a position in the ready queue, and
// says where each row it took from the queue was; an expired lease is
// claimed again wherever it is, with no position.
func TestClaimAfterAPosition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 5)
	first := b.claim(t, store.ClaimParams{Owner: "w", Batch: 2})
	require.Equal(t, ids[:2], rowIDs(first))
	at := b.row(t, ids[0]).AvailableAt
	require.Equal(t, ids[0], first[0].Ready.ID)
	require.True(t, first[0].Ready.At.Equal(at), "the row's available_at")
	require.True(t, first[0].Ready.Less(first[1].Ready))

	rest := b.claim(t, store.ClaimParams{Owner: "w", Batch: 2, After: first[1].Ready})
	require.Equal(t, ids[2:4], rowIDs(rest), "after the position")

	// Behind the position, pending again (a claim whose reply was lost,
	// given back): not claimed from there, claimed from the front.
	b.exec(t, "UPDATE {{table}} SET status = 'pending', lease_owner = NULL, lease_until = NULL WHERE id = $1", ids[1])
	b.expireNow(t, ids[0])
	got := b.claim(t, store.ClaimParams{Owner: "w", After: rest[1].Ready})
	require.Equal(t, []int64{ids[0], ids[4]}, rowIDs(got), "the expired lease and the row after the position")
	require.True(t, got[0].Ready.IsZero(), "an expired lease has no place in the queue")
	require.Equal(t, ids[4], got[1].Ready.ID)
	require.Equal(t, []int64{ids[1]}, rowIDs(b.claim(t, store.ClaimParams{Owner: "w"})), "from the front")
}

// A claim looks for expired leases only among those that ran out since
// the time it is given, or not at all; the reap of rows with no attempt
// left too.
func TestClaimLooksForExpiredLeasesSince(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 4)
	require.Len(t, b.claim(t, store.ClaimParams{Owner: "w"}), 4)
	b.expireNow(t, ids[0])
	b.exec(t, "UPDATE {{table}} SET lease_until = now() - interval '1 hour' WHERE id = $1", ids[1])
	b.exec(t, "UPDATE {{table}} SET lease_until = now() - interval '1 hour', attempts = 3 WHERE id = $1", ids[2])
	recent := b.dbNow(t).Add(-time.Minute)

	require.Empty(t, b.claim(t, store.ClaimParams{Owner: "w", MaxAttempts: 3, Expired: store.ExpiredLeases{Skip: true}}))
	require.Equal(t, []int64{ids[0]}, rowIDs(b.claim(t, store.ClaimParams{Owner: "w", MaxAttempts: 3, Expired: store.ExpiredLeases{Since: recent}})),
		"the lease that ran out in the last minute")
	require.Equal(t, "processing", b.row(t, ids[2]).Status, "ran out before: not reaped")
	require.Equal(t, []int64{ids[1]}, rowIDs(b.claim(t, store.ClaimParams{Owner: "w", MaxAttempts: 3})), "all of them")
	require.Equal(t, "dead", b.row(t, ids[2]).Status)
}
