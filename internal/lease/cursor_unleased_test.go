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

// A dispatcher that drops a shard from memory while it reads it (a
// renewal that came back without the shard, a shard given up behind a
// hung publish and not yet released) hands none of the rows read out, and
// does not move the cursor past them, though the database still names it
// the shard's owner under the same token: they are the next owner's to
// deliver.
func TestCursorUnleasedRowsHoldTheCursor(t *testing.T) {
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
		SELECT 'order', g::text, 'Created', '{}' FROM generate_series(1, 5) AS g`)
	require.NoError(t, err)

	c := newCursorLeases(st, pool, Config{Kind: Cursors, Owner: "me", Lease: time.Minute, MaxAttempts: 3,
		PublishTimeout: time.Second, PollInterval: time.Second, Window: 20}, Callbacks{},
		slog.New(slog.NewTextHandler(io.Discard, nil)), 1, NewRegistry(nil))
	n, err := c.acquire(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	c.mu.Lock()
	tokens := c.sync()
	c.mu.Unlock()
	rows, _, err := c.readWindows(ctx, 10, nil, nil)
	require.NoError(t, err)
	require.Len(t, rows, 5)

	c.mu.Lock()
	c.members.drop([]store.ShardLease{{Shard: 0, Token: tokens[0]}})
	kept := c.leaseLocked(rows, tokens, c.unleased)
	c.mu.Unlock()
	require.Empty(t, kept, "no row of a shard no longer held is handed out")
	decided, err := c.Decide(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, decided)

	var owner string
	var moved bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT owner, done::text <> '3:3:' OR win IS NOT NULL FROM `+
		pgx.Identifier{schema, "outbox_shards"}.Sanitize()).Scan(&owner, &moved))
	require.Equal(t, "me", owner, "the database still names the dispatcher")
	require.False(t, moved, "the cursor did not move past rows nobody delivered")
	undelivered, err := st.CursorUndelivered(ctx, pool, false)
	require.NoError(t, err)
	require.True(t, undelivered)
}
