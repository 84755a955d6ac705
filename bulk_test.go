package outbox_test

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// statusByID maps every row's id to its status.
func (b *testBundle) statusByID(t *testing.T) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	for _, r := range b.rows(t) {
		out[r.ID] = r.Status
	}
	return out
}

func (b *testBundle) lastAudit(t *testing.T) outbox.AuditEntry {
	t.Helper()
	entries, err := b.admin.AuditList(t.Context(), 1)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	return entries[0]
}

func TestDeadRetryMatching(t *testing.T) {
	t.Parallel()

	t.Run("DryRunThenRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		ids := b.fixture(t, 40)
		before := b.rows(t)
		f := outbox.Filter{AggregateID: "a-0"} // dead: rows 3, 15, 27, 39

		n, err := b.admin.DeadRetryMatching(ctx, f, outbox.BulkOpts{DryRun: true, Actor: "alice"})
		require.NoError(t, err)
		require.Equal(t, int64(4), n)
		require.Equal(t, before, b.rows(t), "a dry run changes nothing")
		e := b.lastAudit(t)
		require.Equal(t, "alice", e.Actor)
		require.Equal(t, outbox.AuditDeadRetry, e.Action)
		require.Equal(t, []string{"aggregate_id=a-0"}, e.Filter)
		require.Equal(t, int64(4), e.Count)
		require.True(t, e.DryRun)
		require.NotNil(t, e.FinishedAt)

		var progress []int64
		n, err = b.admin.DeadRetryMatching(ctx, f, outbox.BulkOpts{Actor: "alice", BatchSize: 1,
			Progress: func(done int64) { progress = append(progress, done) }})
		require.NoError(t, err)
		require.Equal(t, int64(4), n)
		require.Equal(t, []int64{1, 2, 3, 4}, progress)
		for i, r := range b.rows(t) {
			switch i {
			case 3, 15, 27, 39:
				require.Equal(t, "pending", r.Status, "row %d", i)
				require.Zero(t, r.Attempts)
				require.Equal(t, before[i].LeaseVersion, r.LeaseVersion, "the fencing token never goes back")
				require.Equal(t, before[i].LastError, r.LastError, "last_error stays as the record of why")
			default:
				require.Equal(t, before[i], r, "row %d (id %d) untouched", i, ids[i])
			}
		}
		e = b.lastAudit(t)
		require.False(t, e.DryRun)
		require.Equal(t, int64(4), e.Count)
		require.NotNil(t, e.FinishedAt)
	})

	t.Run("SelectionByIDs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.fixture(t, 8)
		// ids[3] and ids[7] are dead, ids[2] done: only the dead move.
		n, err := b.admin.DeadRetryMatching(t.Context(), outbox.Filter{IDs: []int64{ids[2], ids[3], ids[7]}}, outbox.BulkOpts{})
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		st := b.statusByID(t)
		require.Equal(t, "pending", st[ids[3]])
		require.Equal(t, "pending", st[ids[7]])
		require.Equal(t, "done", st[ids[2]])
	})

	t.Run("NeverTouchesARowReclaimedMeanwhile", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		ids := b.fixture(t, 40) // dead: 3, 7, 11, ..., 39
		count, err := b.admin.Count(ctx, outbox.Filter{Status: []string{"dead"}}, true)
		require.NoError(t, err)
		require.Equal(t, outbox.Count{N: 10}, count)
		// After the first batch, row 39 (dead when counted) is retried by
		// someone else and claimed by a worker: the walk must leave it be.
		reclaimed := ids[39]
		n, err := b.admin.DeadRetryMatching(ctx, outbox.Filter{}, outbox.BulkOpts{BatchSize: 2, Progress: func(done int64) {
			if done == 2 {
				b.exec(t, "UPDATE "+b.quoted+` SET status = 'processing', lease_owner = 'w9', attempts = 1,
					lease_version = lease_version + 1, lease_until = now() + interval '1 minute' WHERE id = $1`, reclaimed)
			}
		}})
		require.NoError(t, err)
		require.Equal(t, int64(9), n)
		r := b.row(t, reclaimed)
		require.Equal(t, "processing", r.Status)
		require.Equal(t, "w9", *r.LeaseOwner)
		require.Equal(t, int64(4), r.LeaseVersion)
		require.Equal(t, 1, r.Attempts)
		require.Equal(t, int64(9), b.lastAudit(t).Count)
	})

	t.Run("OnlyDeadStatus", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fixture(t, 4)
		_, err := b.admin.DeadRetryMatching(t.Context(), outbox.Filter{Status: []string{"dead", "pending"}}, outbox.BulkOpts{})
		var fe *outbox.FilterError
		require.ErrorAs(t, err, &fe)
		require.EqualError(t, err, `filter "status": dead retry acts on dead messages only, not pending,dead`)
		_, err = b.admin.DeadRetryMatching(t.Context(), outbox.Filter{PayloadPath: "$.("}, outbox.BulkOpts{})
		require.ErrorAs(t, err, &fe)
		entries, err := b.admin.AuditList(t.Context(), 0)
		require.NoError(t, err)
		require.Empty(t, entries, "a refused filter writes nothing, not even an audit row")
		require.Equal(t, 1, b.countStatus(t, "dead"))
	})

	t.Run("CancelStopsBetweenBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fixture(t, 40)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		n, err := b.admin.DeadRetryMatching(ctx, outbox.Filter{}, outbox.BulkOpts{BatchSize: 3, Progress: func(int64) { cancel() }})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, int64(3), n)
		require.Equal(t, 7, b.countStatus(t, "dead"))
		e := b.lastAudit(t)
		require.Equal(t, int64(3), e.Count, "the audit row says what was done")
		require.NotNil(t, e.FinishedAt)
	})
}

func TestDeadSkipMatching(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := b.fixture(t, 40)
	f := outbox.Filter{ErrorContains: "TIMEOUT", IDMax: ids[20]} // dead rows 3, 7, 11, 15, 19
	n, err := b.admin.DeadSkipMatching(ctx, f, outbox.BulkOpts{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, int64(5), n)
	require.Equal(t, 10, b.countStatus(t, "dead"))

	var logged bytes.Buffer
	b.admin.SetLogger(slog.New(slog.NewTextHandler(&logged, nil)))
	n, err = b.admin.DeadSkipMatching(ctx, f, outbox.BulkOpts{Actor: "bob"})
	require.NoError(t, err)
	require.Regexp(t, `msg="outbox audit" table=\S+ actor=bob action=dead_skip filter="\[id_max=\d+ error=TIMEOUT\]" count=5 dry_run=false\n$`, logged.String())
	require.Equal(t, int64(5), n)
	require.Equal(t, 5, b.countStatus(t, "dead"))
	r := b.row(t, ids[19])
	require.Equal(t, "done", r.Status)
	require.NotNil(t, r.DoneAt)
	require.Equal(t, "HTTP 503: upstream Timeout", r.lastError())
	e := b.lastAudit(t)
	require.Equal(t, outbox.AuditDeadSkip, e.Action)
	require.Equal(t, "bob", e.Actor)
	require.Equal(t, f.Terms(), e.Filter)
}

func TestDeadRetryByIDAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.fixture(t, 8)
	moved, err := b.admin.DeadRetry(t.Context(), ids[3], ids[4])
	require.NoError(t, err)
	require.Equal(t, []int64{ids[3]}, moved)
	e := b.lastAudit(t)
	require.Equal(t, outbox.AuditDeadRetry, e.Action)
	require.Equal(t, outbox.Filter{IDs: []int64{ids[3], ids[4]}}.Terms(), e.Filter)
	require.Equal(t, int64(1), e.Count)
	require.NotNil(t, e.FinishedAt)

	moved, err = b.admin.DeadRetryAll(t.Context())
	require.NoError(t, err)
	require.Equal(t, []int64{ids[7]}, moved)
	e = b.lastAudit(t)
	require.Empty(t, e.Filter)
	require.Equal(t, int64(1), e.Count)
}

func TestReplay(t *testing.T) {
	t.Parallel()

	t.Run("DeliversAgainMarked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		ids := b.fixture(t, 12) // done: rows 2, 6, 10
		b.exec(t, "UPDATE "+b.quoted+` SET headers = '{"traceparent": "00-1"}' WHERE id = $1`, ids[6])
		before := b.row(t, ids[6])

		n, err := b.admin.Replay(ctx, outbox.Filter{}, outbox.ReplayOpts{Name: "fix-1", DryRun: true})
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		require.Equal(t, 3, b.countStatus(t, "done"))

		// Only what the dispatcher may claim: clear the fixture's other rows.
		b.exec(t, "DELETE FROM "+b.quoted+" WHERE status <> 'done' OR id = $1", ids[10])
		n, err = b.admin.Replay(ctx, outbox.Filter{Status: []string{"done"}}, outbox.ReplayOpts{Name: "fix-1", Actor: "carol"})
		require.NoError(t, err)
		require.Equal(t, int64(2), n)
		r := b.row(t, ids[6])
		require.Equal(t, "pending", r.Status)
		require.Nil(t, r.DoneAt)
		require.Zero(t, r.Attempts)
		require.Equal(t, before.LeaseVersion, r.LeaseVersion)
		d, err := b.admin.Message(ctx, ids[6])
		require.NoError(t, err)
		require.Equal(t, map[string]string{"traceparent": "00-1", "Outbox-Replay": "fix-1"}, d.Headers)
		e := b.lastAudit(t)
		require.Equal(t, outbox.AuditReplay, e.Action)
		require.Equal(t, "fix-1", e.Name)
		require.Equal(t, []string{"status=done"}, e.Filter)
		require.Equal(t, int64(2), e.Count)

		rec := newRecorder(nil)
		d2 := b.dispatcher(t, rec.Sink(), nil)
		drain(t, d2)
		got := rec.Messages()
		require.Len(t, got, 2)
		for _, m := range got {
			require.Equal(t, "fix-1", m.Replay())
			require.Equal(t, m.IDString()+"/replay/fix-1", m.DedupeKey())
		}
		require.ElementsMatch(t, []int64{ids[2], ids[6]}, rec.IDs(), "a replay keeps the message id")
		for _, m := range got {
			if m.ID == ids[6] {
				require.Equal(t, "00-1", m.Headers["traceparent"], "the producer's headers are kept")
			}
		}
		require.Equal(t, 2, b.countStatus(t, "done"))
	})

	t.Run("NeverTouchesARowNotDone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.fixture(t, 40) // done: 2, 6, ..., 38
		// After the first batch, row 38 is purged and a new row... no: it is
		// moved to dead by someone else; replay must leave it alone.
		n, err := b.admin.Replay(t.Context(), outbox.Filter{}, outbox.ReplayOpts{Name: "r", BatchSize: 4,
			Progress: func(done int64) {
				if done == 4 {
					b.exec(t, "UPDATE "+b.quoted+" SET status = 'processing', lease_owner = 'w', done_at = NULL WHERE id = $1", ids[38])
				}
			}})
		require.NoError(t, err)
		require.Equal(t, int64(9), n)
		r := b.row(t, ids[38])
		require.Equal(t, "processing", r.Status)
		require.Equal(t, "w", *r.LeaseOwner)
		require.Zero(t, b.countStatus(t, "done"))
	})

	// Cancelled while a batch is in flight, the run finishes that batch and
	// counts it: a batch cut off mid-flight could commit and report nothing.
	t.Run("CancelFinishesTheBatchInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fixture(t, 40) // 10 done rows
		fn := pgx.Identifier{b.schema, "slow_update"}.Sanitize()
		b.exec(t, "CREATE FUNCTION "+fn+"() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.05); RETURN NEW; END $$")
		b.exec(t, "CREATE TRIGGER slow_update BEFORE UPDATE ON "+b.quoted+" FOR EACH ROW EXECUTE FUNCTION "+fn+"()")
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(100*time.Millisecond, cancel) // mid-way through the first batch of 4
		n, err := b.admin.Replay(ctx, outbox.Filter{}, outbox.ReplayOpts{Name: "r", BatchSize: 4})
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, int64(4), n, "the batch in flight counted")
		require.Equal(t, 6, b.countStatus(t, "done"), "and moved: 4 of the 10 done rows")
	})

	t.Run("Paced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.fixture(t, 20) // 5 done rows
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var waits []time.Duration
		outbox.SetPaceClock(b.admin, func() time.Time { return now }, func(_ context.Context, d time.Duration) error {
			waits = append(waits, d)
			now = now.Add(d)
			return nil
		})
		var progress []int64
		n, err := b.admin.Replay(t.Context(), outbox.Filter{}, outbox.ReplayOpts{Name: "slow", Rate: 2,
			Progress: func(done int64) { progress = append(progress, done) }})
		require.NoError(t, err)
		require.Equal(t, int64(5), n)
		// Batches of a second's worth (2): 2, 4, then the last one.
		require.Equal(t, []int64{2, 4, 5}, progress)
		require.Equal(t, []time.Duration{time.Second, time.Second}, waits)
	})

	t.Run("BadOptions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, o := range []outbox.ReplayOpts{{}, {Name: "has space"}, {Name: "x", Rate: -1}, {Name: "x", Rate: 1e-12},
			{Name: "x", Rate: 0.001}, {Name: "x", Rate: 1e7}, {Name: "x", Rate: math.NaN()}, {Name: "x", Rate: math.Inf(1)}} {
			_, err := b.admin.Replay(t.Context(), outbox.Filter{}, o)
			var re *outbox.ReplayOptsError
			require.ErrorAs(t, err, &re, "%+v", o)
		}
		require.EqualError(t, outbox.ReplayOpts{Name: "x", Rate: 1e-12}.Validate(),
			"outbox: replay: Rate must be 0.01 to 1000000 messages per second, or 0 (unlimited), got 1e-12")
		require.NoError(t, outbox.ReplayOpts{Name: "x", Rate: 0.01}.Validate())
		_, err := b.admin.Replay(t.Context(), outbox.Filter{Status: []string{"dead"}}, outbox.ReplayOpts{Name: "x"})
		require.EqualError(t, err, `filter "status": replay acts on done messages only, not dead`)
	})
}

func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.fixture(t, 40)
	rows, err := b.admin.BreakdownByEventType(ctx, 0)
	require.NoError(t, err)
	// Even rows OrderPaid (pending 0, 4, ..; done 2, 6, ..), odd OrderShipped
	// (processing 1, 5, ..; dead 3, 7, ..).
	require.Equal(t, []outbox.BreakdownRow{
		{Key: "OrderPaid", Pending: 10},
		{Key: "OrderShipped", Processing: 10, Dead: 10},
	}, []outbox.BreakdownRow{rows[1], rows[0]})
	rows, err = b.admin.BreakdownByAggregateType(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []outbox.BreakdownRow{{Key: "order", Pending: 10, Processing: 10, Dead: 10}}, rows)

	b.exec(t, "UPDATE "+b.quoted+` SET lease_until = now() - interval '1 second'
		WHERE id IN (SELECT id FROM `+b.quoted+` WHERE status = 'processing' ORDER BY id LIMIT 5)`)
	ds, err := b.admin.Dispatchers(ctx)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "worker-1", ds[0].Owner)
	require.Equal(t, int64(10), ds[0].InFlight)
	require.Equal(t, int64(5), ds[0].Expired)
	require.WithinDuration(t, b.dbNow(t).Add(time.Minute), ds[0].LeaseUntil, 10*time.Second)
}

// A bulk write acts on what its preview counted: rows that come to match
// afterwards (a newer dead row, an older row that dies later) are left
// alone, and the write never moves more than the preview's count.
func TestBulkPinnedToPreview(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	ids := b.fixture(t, 40) // dead: every fourth, 10 rows
	f := outbox.Filter{EventType: "OrderShipped"}
	p, err := b.admin.PreviewMatching(ctx, "dead_retry", f, outbox.PreviewOpts{})
	require.NoError(t, err)
	require.Equal(t, int64(10), p.N)
	require.Equal(t, outbox.Bound{MaxID: ids[39], Limit: 10}, p.Bound)

	// After the preview: an older pending row dies, and newer rows arrive dead.
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'dead', event_type = 'OrderShipped' WHERE id = $1", ids[0])
	newer := b.fixture(t, 8)
	b.exec(t, "UPDATE "+b.quoted+" SET event_type = 'OrderShipped' WHERE id = ANY($1)", newer)

	var total int64
	n, err := b.admin.DeadRetryMatching(ctx, f, outbox.BulkOpts{Bound: &p.Bound, Total: func(n int64) { total = n }})
	require.NoError(t, err)
	require.Equal(t, int64(10), total)
	require.Equal(t, int64(10), n, "no more than the preview counted")
	var newerDead int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.quoted+" WHERE status = 'dead' AND id = ANY($1)", newer).Scan(&newerDead))
	require.Equal(t, 2, newerDead, "rows newer than the preview are left alone")

	// IncludeNewer lifts the pin.
	n, err = b.admin.DeadRetryMatching(ctx, f, outbox.BulkOpts{IncludeNewer: true})
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
}

// Without a preview the write is pinned when it starts: rows that come to
// match while it runs (here, as soon as it has counted) are not moved, so
// it ends with the total it announced.
func TestBulkPinnedAtStart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.fixture(t, 40) // done: 10 rows
	var total int64
	var arrived []int64
	n, err := b.admin.Replay(ctx, outbox.Filter{}, outbox.ReplayOpts{Name: "pin", BatchSize: 3, Total: func(n int64) {
		total = n
		arrived = b.fixture(t, 8) // producers and dispatchers carry on: two more done rows
	}})
	require.NoError(t, err)
	require.Equal(t, int64(10), total)
	require.Equal(t, int64(10), n)
	var stillDone int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+b.quoted+" WHERE status = 'done' AND id = ANY($1)", arrived).Scan(&stillDone))
	require.Equal(t, 2, stillDone)

	// A preview of an empty match pins to nothing, though matches arrive.
	p, err := b.admin.PreviewMatching(ctx, "replay", outbox.Filter{EventType: "Nothing"}, outbox.PreviewOpts{Name: "none"})
	require.NoError(t, err)
	require.Equal(t, int64(0), p.Bound.Limit)
	b.exec(t, "UPDATE "+b.quoted+" SET event_type = 'Nothing' WHERE id = ANY($1)", arrived)
	n, err = b.admin.Replay(ctx, outbox.Filter{EventType: "Nothing"}, outbox.ReplayOpts{Name: "none", Bound: &p.Bound})
	require.NoError(t, err)
	require.Zero(t, n)
}
