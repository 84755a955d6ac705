package outbox_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// TestDispatcherStatementsIgnoreSearchPath: a dispatcher configured with an
// unqualified table whose search_path holds a stray outbox_waiters table in
// an earlier schema records its wait in the table's own waiters table, the
// one the wake-up trigger reads, and delivers. Before, its statements named
// outbox_waiters unqualified and wrote to the stray table, so producers
// never woke it.
func TestDispatcherStatementsIgnoreSearchPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stray := testdb.NewSchema(t)
	b.exec(t, "CREATE TABLE "+pgx.Identifier{stray, "outbox_waiters"}.Sanitize()+
		" (owner text PRIMARY KEY, wait_until timestamptz NOT NULL)")
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{stray}.Sanitize() + ", " + pgx.Identifier{b.schema}.Sanitize()
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	rec := newRecorder(nil)
	d, err := outbox.NewDispatcher(pool, rec.Sink(), &outbox.Config{Table: "outbox", Logger: quietLogger(), Owner: "sp"})
	require.NoError(t, err)
	start(t, d)

	waiting := `SELECT EXISTS (SELECT 1 FROM ` + pgx.Identifier{b.schema, "outbox_waiters"}.Sanitize() + ` WHERE owner = 'sp')`
	eventually(t, func() bool { return b.tryQuery(waiting) }, "the idle dispatcher waits in the table's schema")
	require.False(t, b.tryQuery(`SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{stray, "outbox_waiters"}.Sanitize()+`)`),
		"the stray table earlier on the path is never written")
	ids := b.enqueueN(t, 3, "a")
	rec.waitLen(t, 3, 10*time.Second)
	require.Equal(t, 3, rec.Len())
	require.ElementsMatch(t, ids, rec.IDs())
}
