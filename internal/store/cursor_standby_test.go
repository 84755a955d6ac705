package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/pgcluster"
	"github.com/outboxd/outbox/internal/store"
)

// A window read on a hot standby is refused: the standby's snapshot lists
// no transaction in progress on the primary, so a producer transaction
// open there would count as delivered and its rows be skipped once it
// commits. (A failover's standby answers reads before it is promoted.)
func TestCursorLoadRefusesAStandby(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	primary, err := pgcluster.Start(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop(context.Background()) })
	standby, err := primary.StartStandby(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop(context.Background()) })
	connect := func(port int) *pgxpool.Pool {
		p, err := pgxpool.New(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", primary.User, port))
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	onPrimary, onStandby := connect(primary.Port), connect(standby.Port)

	st, err := store.New("outbox")
	require.NoError(t, err)
	require.NoError(t, st.Migrate(ctx, onPrimary))
	require.NoError(t, pgx.BeginFunc(ctx, onPrimary, func(tx pgx.Tx) error { return st.EnableShards(ctx, tx, 1) }))
	require.NoError(t, pgx.BeginFunc(ctx, onPrimary, func(tx pgx.Tx) error { return st.EnableCursor(ctx, tx) }))
	got, err := st.AcquireShards(ctx, onPrimary, "d1", time.Minute, 1, 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	open, err := onPrimary.Begin(ctx)
	require.NoError(t, err)
	defer open.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // never committed
	_, err = open.Exec(ctx, st.InsertSQL(1), "order", "a", "E", `{}`, nil)
	require.NoError(t, err)

	load := []store.WindowLoad{{ShardLease: got[0].ShardLease}}
	// Once the standby has replayed the table and the shard lease, its
	// answer is the refusal.
	require.Eventually(t, func() bool {
		_, err := st.LoadWindows(ctx, onStandby, "d1", load, 100)
		return errors.Is(err, store.ErrInRecovery)
	}, time.Minute, 50*time.Millisecond, "the standby refuses the read")
	windows, err := st.LoadWindows(ctx, onPrimary, "d1", load, 100)
	require.NoError(t, err)
	require.Len(t, windows, 1, "the primary reads the window")
}
