package outbox_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// A transaction pooler hands statements to other server sessions, so the
// prepared statements pgx caches vanish under it (SQLSTATE 26000). When
// that happens mid-run, not at start-up, the claim error is logged with
// what to change. The pool below drops every prepared statement of a
// connection when it is released, as such a pooler does.
func TestClaimThroughATransactionPoolerIsExplained(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.AfterRelease = func(c *pgx.Conn) bool {
		_, err := c.Exec(context.Background(), "DEALLOCATE ALL")
		return err == nil
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	logs := &lockedBuffer{}
	d, err := outbox.NewDispatcher(pool, outbox.SinkFunc(func(context.Context, *outbox.Message) error { return nil }), &outbox.Config{
		Table: b.table, PollInterval: 20 * time.Millisecond, DisableNotify: true,
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	go func() { _ = d.Run(ctx) }()
	for ctx.Err() == nil && !strings.Contains(logs.String(), "claim failed") {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	out := logs.String()
	require.Contains(t, out, "SQLSTATE 26000")
	require.Contains(t, out, "default_query_exec_mode=exec")
}
