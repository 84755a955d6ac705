package lease

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

// lossyDB runs statements on the pool; armed, it lets the next query run
// to its end (its commit included) and then reports the connection lost,
// as when the connection dies between COMMIT and its reply.
type lossyDB struct {
	*pgxpool.Pool
	lose atomic.Bool
}

var errReplyLost = errors.New("unexpected EOF")

func (db *lossyDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !db.lose.CompareAndSwap(true, false) {
		return db.Pool.Query(ctx, sql, args...)
	}
	rows, err := db.Pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return nil, errReplyLost
}

// rowTable migrates a table in a schema of the test's own and enqueues
// n messages, two per aggregate.
func rowTable(t *testing.T, n int) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	st, err := store.New(testdb.NewSchema(t) + ".outbox")
	require.NoError(t, err)
	pool := testdb.Pool(t)
	require.NoError(t, st.Migrate(t.Context(), pool))
	args := make([]any, 0, store.InsertParams*n)
	for i := range n {
		args = append(args, "order", fmt.Sprintf("agg-%d", i/2), "E", `{}`, nil)
	}
	rows, err := pool.Query(t.Context(), st.InsertSQL(n), args...)
	require.NoError(t, err)
	rows.Close()
	require.NoError(t, rows.Err())
	return st, pool
}

// register adds claimed rows to the registry, as the fetcher does.
func register(leases *Registry, rows []store.Row) {
	ls := make([]store.Lease, len(rows))
	for i, r := range rows {
		ls[i] = store.Lease{ID: r.ID, Version: r.LeaseVersion}
	}
	leases.Add(ls, time.Now().Add(time.Hour))
}

// setDB has a row-lease mode run its claims on db.
func setDB(m Mode, db store.DB) {
	switch r := m.(type) {
	case *rowLeases:
		r.db = db
	case *orderedRowLeases:
		r.db = db
	}
}

func processing(t *testing.T, st *store.Store, pool *pgxpool.Pool) (n int, attempts int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(t.Context(),
		"SELECT count(*), coalesce(sum(attempts), 0) FROM "+st.QuotedTable()+" WHERE status = 'processing'").Scan(&n, &attempts))
	return n, attempts
}

// A claim whose reply is lost committed all the same: its rows are
// processing under this dispatcher, which never heard of them. The next
// claim first gives them back (pending, attempt refunded) and claims them
// again at once, instead of leaving them, and in ordered mode their
// aggregates, to wait out the lease; rows the dispatcher does know it
// holds are left alone.
func TestClaimReplyLost(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%t", ordered), func(t *testing.T) {
			t.Parallel()
			st, pool := rowTable(t, 8)
			db := &lossyDB{Pool: pool}
			leases := NewRegistry(nil)
			m, err := New(t.Context(), st, pool, leases, Config{
				Ordered: ordered, Owner: "lossy", Lease: time.Hour, MaxAttempts: 5, PollInterval: time.Second, Window: 10,
			}, Callbacks{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			require.NoError(t, err)
			setDB(m, db)

			held, _, err := m.Claim(t.Context(), 2, false)
			require.NoError(t, err)
			require.Len(t, held, 2)
			register(leases, held) // as the fetcher does before it claims again

			db.lose.Store(true)
			_, _, err = m.Claim(t.Context(), 2, false)
			require.ErrorIs(t, err, errReplyLost)
			n, _ := processing(t, st, pool)
			require.Equal(t, 4, n, "the lost claim committed")

			again, _, err := m.Claim(t.Context(), 10, false)
			require.NoError(t, err)
			n, attempts := processing(t, st, pool)
			require.Equal(t, len(held)+len(again), n, "every row processing is one the dispatcher holds")
			require.Equal(t, n, attempts, "each row processing is on its first attempt: the lost claim's was refunded")
			for _, r := range again {
				require.Equal(t, 1, r.Attempts)
			}

			// The rows held before the lost reply are still this
			// dispatcher's: their finalize holds.
			writes := make([]store.RowWrite, len(held))
			for i, r := range held {
				writes[i] = store.RowWrite{ID: r.ID, LeaseVersion: r.LeaseVersion, Status: store.StatusDone}
			}
			ok, err := m.Finalize(t.Context(), writes)
			require.NoError(t, err)
			require.Equal(t, []bool{true, true}, ok)
			m.Settled(writes)
		})
	}
}

// A dispatcher that stops right after a claim whose reply was lost gives
// its rows back as it leaves.
func TestClaimReplyLostAtStop(t *testing.T) {
	t.Parallel()
	st, pool := rowTable(t, 4)
	db := &lossyDB{Pool: pool}
	m, err := New(t.Context(), st, pool, NewRegistry(nil), Config{
		Owner: "lossy", Lease: time.Hour, MaxAttempts: 5, PollInterval: time.Second, Window: 10,
	}, Callbacks{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	setDB(m, db)
	db.lose.Store(true)
	_, _, err = m.Claim(t.Context(), 4, false)
	require.ErrorIs(t, err, errReplyLost)
	require.NoError(t, m.Close(t.Context()))
	n, _ := processing(t, st, pool)
	require.Zero(t, n)
}
