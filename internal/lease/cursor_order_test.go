package lease

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

// Ordered, a message whose delivery failed while a read of its
// aggregate's next message was under way holds that message back: the
// read's statement ran before the failed one's parked row was written, so
// only the dispatcher's memory knows of it. Handed out, the next message
// went to the sink before the retry of the one before it.
func TestCursorFailureDuringAReadHoldsTheAggregateBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	st, err := store.New(schema + ".outbox")
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx, pool))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableShards(ctx, tx, 1) }))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableCursor(ctx, tx) }))
	_, err = pool.Exec(ctx, `INSERT INTO `+st.QuotedTable()+` (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'A', 'E' || g, '{}' FROM generate_series(1, 3) AS g`)
	require.NoError(t, err)

	c := newCursorLeases(st, pool, Config{Kind: Cursors, Owner: "me", Lease: time.Minute, MaxAttempts: 5, Ordered: true,
		PublishTimeout: time.Second, PollInterval: time.Hour, Window: 20}, Callbacks{},
		slog.New(slog.NewTextHandler(io.Discard, nil)), 1, NewRegistry(nil))
	n, err := c.acquire(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	first, _, err := c.Claim(ctx, 1, false)
	require.NoError(t, err)
	require.Len(t, first, 1)
	head := first[0]

	// The next read's statement runs while the head is in flight...
	c.mu.Lock()
	began := c.begin()
	tokens := c.sync()
	c.mu.Unlock()
	next, _, err := c.readWindows(ctx, 2, nil, nil)
	require.NoError(t, err)
	require.Len(t, next, 2)
	require.False(t, next[0].Blocked, "the head's failure is not written yet")

	// ... the head fails, and its outcome is written and settled ...
	failed := store.RowWrite{ID: head.ID, LeaseVersion: head.LeaseVersion, Status: store.StatusPending, Delay: time.Hour, Error: "refused"}
	decided, err := c.Decide(ctx, []store.RowWrite{failed})
	require.NoError(t, err)
	require.Equal(t, []Decision{{ID: head.ID, Token: head.LeaseVersion, Held: true}}, decided)
	c.Settled([]store.RowWrite{failed})

	// ... before the read hands its rows out.
	c.mu.Lock()
	kept := c.handOut(next, tokens, began)
	c.mu.Unlock()
	require.Empty(t, kept, "nothing of the aggregate goes out before the retry of its head")

	// The rows held back are parked behind the head, their attempts
	// refunded, and nothing of the aggregate is read until the head's
	// retry is due.
	_, err = c.Decide(ctx, nil)
	require.NoError(t, err)
	type parked struct {
		ID       int64
		Status   string
		Attempts int
	}
	rows, err := pool.Query(ctx, `SELECT id, status, attempts FROM `+pgx.Identifier{schema, "outbox_parked"}.Sanitize()+` ORDER BY id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[parked])
	require.NoError(t, err)
	require.Equal(t, []parked{{head.ID, "pending", 1}, {next[0].ID, "pending", 0}, {next[1].ID, "pending", 0}}, got)
	again, _, err := c.Claim(ctx, 10, true)
	require.NoError(t, err)
	require.Empty(t, again)
}

// A batch of parked messages whose last message to settle is one held
// back unwritten (the chains could not take it) is written all the same:
// the outcomes of the others are decided, not left waiting.
func TestCursorParkedBatchCompletedByAHeldBackMessage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	st, err := store.New(schema + ".outbox")
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx, pool))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableShards(ctx, tx, 1) }))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableCursor(ctx, tx) }))
	_, err = pool.Exec(ctx, `INSERT INTO `+st.QuotedTable()+` (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'a', 'E', '{}'), ('order', 'b', 'E', '{}')`)
	require.NoError(t, err)
	c := newCursorLeases(st, pool, Config{Kind: Cursors, Owner: "me", Lease: time.Minute, MaxAttempts: 5, Ordered: true,
		PublishTimeout: time.Second, PollInterval: time.Hour, Window: 20}, Callbacks{},
		slog.New(slog.NewTextHandler(io.Discard, nil)), 1, NewRegistry(nil))
	_, err = c.acquire(ctx, 1)
	require.NoError(t, err)

	first, _, err := c.Claim(ctx, 10, false)
	require.NoError(t, err)
	require.Len(t, first, 2)
	var failed []store.RowWrite
	for _, r := range first {
		failed = append(failed, store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusPending, Error: "busy"})
	}
	decided, err := c.Decide(ctx, failed)
	require.NoError(t, err)
	require.Len(t, decided, 2)
	c.Settled(failed)

	parked, _, err := c.Claim(ctx, 10, true)
	require.NoError(t, err)
	require.Len(t, parked, 2, "both parked messages read in one batch")
	delivered := store.RowWrite{ID: parked[1].ID, LeaseVersion: parked[1].LeaseVersion, Status: store.StatusDone}
	decided, err = c.Decide(ctx, []store.RowWrite{delivered})
	require.NoError(t, err)
	require.Empty(t, decided, "its batch waits for the other message")
	c.Settled([]store.RowWrite{{ID: parked[0].ID, LeaseVersion: parked[0].LeaseVersion}}) // held back unwritten
	decided, err = c.Decide(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []Decision{{ID: delivered.ID, Token: delivered.LeaseVersion, Held: true}}, decided)
}

// A batch of parked messages completed while a Decide's statement runs
// (the fetcher settling a message held back, the keeper parking a hung
// publish) is written by the next Decide: it was queued behind the batches
// the statement wrote, and forgotten with them, its messages left in
// flight for good and its shard never read again.
func TestCursorBatchCompletedDuringADecideIsWrittenNext(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	st, err := store.New(schema + ".outbox")
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx, pool))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableShards(ctx, tx, 1) }))
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return st.EnableCursor(ctx, tx) }))
	insert := func(aggs ...string) {
		for _, agg := range aggs {
			_, err := pool.Exec(ctx, `INSERT INTO `+st.QuotedTable()+` (aggregate_type, aggregate_id, event_type, payload)
				VALUES ('order', $1, 'E', '{}')`, agg)
			require.NoError(t, err)
		}
	}
	insert("a", "b")
	c := newCursorLeases(st, pool, Config{Kind: Cursors, Owner: "me", Lease: time.Minute, MaxAttempts: 5, Ordered: true,
		PublishTimeout: time.Second, PollInterval: time.Hour, Window: 20}, Callbacks{},
		slog.New(slog.NewTextHandler(io.Discard, nil)), 1, NewRegistry(nil))
	_, err = c.acquire(ctx, 1)
	require.NoError(t, err)

	first, _, err := c.Claim(ctx, 10, false)
	require.NoError(t, err)
	require.Len(t, first, 2)
	var failed []store.RowWrite
	for _, r := range first {
		failed = append(failed, store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusPending, Error: "busy"})
	}
	_, err = c.Decide(ctx, failed)
	require.NoError(t, err)
	c.Settled(failed)

	parked, _, err := c.Claim(ctx, 10, true)
	require.NoError(t, err)
	require.Len(t, parked, 2, "both parked messages read in one batch")
	delivered := store.RowWrite{ID: parked[1].ID, LeaseVersion: parked[1].LeaseVersion, Status: store.StatusDone}
	decided, err := c.Decide(ctx, []store.RowWrite{delivered})
	require.NoError(t, err)
	require.Empty(t, decided, "its batch waits for the other message")

	insert("c")
	fresh, _, err := c.Claim(ctx, 10, false)
	require.NoError(t, err)
	require.Len(t, fresh, 1)
	// The parked batch completes while the window batch is written.
	c.afterAdvance = func() {
		c.afterAdvance = nil
		c.Settled([]store.RowWrite{{ID: parked[0].ID, LeaseVersion: parked[0].LeaseVersion}}) // held back unwritten
	}
	done := store.RowWrite{ID: fresh[0].ID, LeaseVersion: fresh[0].LeaseVersion, Status: store.StatusDone}
	decided, err = c.Decide(ctx, []store.RowWrite{done})
	require.NoError(t, err)
	require.Equal(t, []Decision{{ID: done.ID, Token: done.LeaseVersion, Held: true}}, decided)
	decided, err = c.Decide(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []Decision{{ID: delivered.ID, Token: delivered.LeaseVersion, Held: true}}, decided,
		"the parked batch completed meanwhile is written")
}
