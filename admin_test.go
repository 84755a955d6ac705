package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

func TestAdminStatus(t *testing.T) {
	t.Parallel()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st, err := b.admin.Status(t.Context())
		require.NoError(t, err)
		got, err := json.Marshal(st)
		require.NoError(t, err)
		require.JSONEq(t, `{
			"counts": {"pending": 0, "processing": 0, "done": 0, "dead": 0},
			"done_estimated": false,
			"oldest_pending_age_seconds": null,
			"expired_leases": 0,
			"attempts": {},
			"blocked": {"aggregates": 0, "messages": 0},
			"dispatchers": [],
			"pauses": [],
			"destinations": []
		}`, string(got))
	})

	t.Run("DonePastTenThousandIsTheEstimate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, "INSERT INTO "+b.quoted+" (aggregate_type, aggregate_id, event_type, payload, status, done_at) "+
			"SELECT 'order', g::text, 'OrderPaid', '{}', 'done', now() FROM generate_series(1, 20000) AS g")
		b.enqueueN(t, 2, "a")
		b.exec(t, "ANALYZE "+b.quoted)
		st, err := b.admin.Status(t.Context())
		require.NoError(t, err)
		require.True(t, st.DoneEstimated)
		require.Equal(t, int64(2), st.Counts["pending"], "the other counts stay exact")
		require.InDelta(t, 20000, st.Counts["done"], 1000, "reltuples after ANALYZE of a small table is close")
	})

	t.Run("EveryState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.enqueueN(t, 6, "a")
		set := func(id int64, assignments string) {
			b.exec(t, "UPDATE "+b.quoted+" SET "+assignments+" WHERE id = $1", id)
		}
		set(ids[0], "status = 'processing', attempts = 1, lease_owner = 'crashed', lease_until = now() - interval '1 second'")
		set(ids[1], "status = 'processing', attempts = 1, lease_owner = 'alive', lease_until = now() + interval '1 minute'")
		set(ids[2], "status = 'done', attempts = 1, done_at = now()")
		set(ids[3], "status = 'dead', attempts = 12")
		set(ids[4], "attempts = 2")
		set(ids[5], "created_at = now() - interval '90 seconds'")

		st, err := b.admin.Status(t.Context())
		require.NoError(t, err)
		raw, err := json.Marshal(st)
		require.NoError(t, err)
		var got map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &got))
		require.Len(t, got, 9, string(raw))
		require.JSONEq(t, `[]`, string(got["dispatchers"]))
		// The dead message is not its aggregate's oldest unfinished one:
		// nothing waits behind a dead head.
		require.JSONEq(t, `{"aggregates": 0, "messages": 0}`, string(got["blocked"]))
		require.JSONEq(t, `false`, string(got["done_estimated"]))
		require.JSONEq(t, `{"pending": 2, "processing": 2, "done": 1, "dead": 1}`, string(got["counts"]))
		require.JSONEq(t, `1`, string(got["expired_leases"]))
		require.JSONEq(t, `{"0": 1, "1": 2, "2": 1}`, string(got["attempts"]))
		var age float64
		require.NoError(t, json.Unmarshal(got["oldest_pending_age_seconds"], &age))
		require.GreaterOrEqual(t, age, 90.0)
		require.Less(t, age, 150.0)
	})

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		admin, err := outbox.NewAdmin(b.pool, b.schema+".missing")
		require.NoError(t, err)
		_, err = admin.Status(t.Context())
		require.ErrorIs(t, err, outbox.ErrTableMissing)
	})
}

func TestAdminDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 5, "a")
	for _, id := range ids[:4] {
		b.exec(t, "UPDATE "+b.quoted+" SET status = 'dead', attempts = 3, lease_version = 3, last_error = 'boom' WHERE id = $1", id)
	}
	pending := ids[4]
	ctx := t.Context()

	page, err := b.admin.DeadList(ctx, 0, 2)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, []int64{ids[0], ids[1]}, []int64{page[0].ID, page[1].ID})
	first := page[0]
	require.Equal(t, "order", first.AggregateType)
	require.Equal(t, "a", first.AggregateID)
	require.Equal(t, "OrderCreated", first.EventType)
	require.JSONEq(t, `{"n": 0}`, string(first.Payload))
	require.Equal(t, 3, first.Attempts)
	require.Equal(t, int64(3), first.LeaseVersion)
	require.Equal(t, "boom", first.LastError)
	require.False(t, first.CreatedAt.IsZero())
	page, err = b.admin.DeadList(ctx, page[1].ID, 10)
	require.NoError(t, err)
	require.Len(t, page, 2)
	require.Equal(t, []int64{ids[2], ids[3]}, []int64{page[0].ID, page[1].ID})

	_, err = b.admin.DeadRetry(ctx)
	require.Error(t, err, "DeadRetry without ids")
	moved, err := b.admin.DeadRetry(ctx, ids[0], pending)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[0]}, moved, "only dead rows move")
	r := b.row(t, ids[0])
	require.Equal(t, "pending", r.Status)
	require.Zero(t, r.Attempts, "a retried message gets a fresh attempt budget")
	require.False(t, r.AvailableAt.After(b.dbNow(t)))

	_, err = b.admin.DeadSkip(ctx)
	require.Error(t, err, "DeadSkip without ids")
	moved, err = b.admin.DeadSkip(ctx, ids[1], pending)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[1]}, moved)
	r = b.row(t, ids[1])
	require.Equal(t, "done", r.Status)
	require.NotNil(t, r.DoneAt)
	require.Equal(t, "boom", r.lastError(), "a skipped message keeps why it died")

	moved, err = b.admin.DeadRetryAll(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{ids[2], ids[3]}, moved)
	page, err = b.admin.DeadList(ctx, 0, 10)
	require.NoError(t, err)
	require.Empty(t, page)
	require.Equal(t, 4, b.countStatus(t, "pending"))
}

// DeadRetry wakes an idle dispatcher itself: the retried message is not an
// insert, so the insert trigger would not.
func TestAdminDeadRetryWakesDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueueN(t, 1, "a")[0]

	var calls atomic.Int64
	rec := newRecorder(func(context.Context, *outbox.Message) error {
		if calls.Add(1) == 1 {
			return outbox.Permanent(errors.New("schema mismatch"))
		}
		return nil
	})
	sig := newSignals()
	d := b.dispatcher(t, rec.Sink(), &outbox.Config{PollInterval: 10 * time.Second, Hook: sig})
	start(t, d)
	eventually(t, func() bool { return d.Stats().Dead == 1 })
	waitIdle(t, sig)

	sent := time.Now()
	moved, err := b.admin.DeadRetry(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, moved)
	eventually(t, func() bool { return d.Stats().Done == 1 })
	require.Less(t, time.Since(sent), 2*time.Second, "the retried message waited for the poll")
	require.Equal(t, "done", b.row(t, id).Status)
}

func TestAdminPurge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 10, "a")
	for _, id := range ids[:7] {
		b.exec(t, "UPDATE "+b.quoted+" SET status = 'done', done_at = now() - interval '2 hours' WHERE id = $1", id)
	}
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'done', done_at = now() WHERE id = $1", ids[7])
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'dead' WHERE id = $1", ids[8])

	_, err := b.admin.Purge(t.Context(), -time.Second, nil)
	require.Error(t, err)

	var progress []int64
	n, err := b.admin.Purge(t.Context(), time.Hour, &outbox.PurgeOpts{
		BatchSize: 3,
		Progress:  func(deleted int64) { progress = append(progress, deleted) },
	})
	require.NoError(t, err)
	require.Equal(t, int64(7), n)
	require.Equal(t, []int64{3, 6, 7}, progress)
	remaining := b.rows(t)
	require.Len(t, remaining, 3)
	require.Equal(t, []int64{ids[7], ids[8], ids[9]}, []int64{remaining[0].ID, remaining[1].ID, remaining[2].ID})

	progress = nil
	n, err = b.admin.Purge(t.Context(), time.Hour, &outbox.PurgeOpts{
		BatchSize: 3,
		Progress:  func(deleted int64) { progress = append(progress, deleted) },
	})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, progress, "Progress called for an empty batch")

	n, err = b.admin.Purge(t.Context(), 0, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "older-than 0 purges every done row")
	require.Len(t, b.rows(t), 2)

	// Without the done index (a table migrate has not upgraded) every
	// batch would read and sort all done rows: the purge refuses instead.
	b.exec(t, "DROP INDEX "+pgx.Identifier{b.schema, "outbox_done"}.Sanitize())
	_, err = b.admin.Purge(t.Context(), 0, nil)
	require.ErrorIs(t, err, outbox.ErrTableOutdated)
	require.ErrorContains(t, err, "outbox_done")
}

// TestDropWakeTrigger: inserts stop notifying once the trigger is dropped,
// and Migrate creates it again.
func TestDropWakeTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	triggers := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(),
			"SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal", b.quoted).Scan(&n))
		return n
	}
	require.Equal(t, 1, triggers())
	require.NoError(t, b.admin.DropWakeTrigger(t.Context()))
	require.Equal(t, 0, triggers())
	require.NoError(t, b.admin.DropWakeTrigger(t.Context()), "dropping it twice is no error")
	require.NoError(t, b.admin.Migrate(t.Context()))
	require.Equal(t, 1, triggers())
}
