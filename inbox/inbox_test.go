package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/inbox"
	"github.com/outboxd/outbox/internal/testdb"
)

type testBundle struct {
	pool    *pgxpool.Pool
	schema  string
	table   string // schema.inbox
	quoted  string // quoted inbox table
	effects string // quoted business table the handlers write to
	ib      *inbox.Inbox
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	b := &testBundle{
		pool:    pool,
		schema:  schema,
		table:   schema + ".inbox",
		quoted:  pgx.Identifier{schema, "inbox"}.Sanitize(),
		effects: pgx.Identifier{schema, "effects"}.Sanitize(),
	}
	var err error
	b.ib, err = inbox.New(b.table)
	require.NoError(t, err)
	require.NoError(t, b.ib.Migrate(t.Context(), pool))
	// No unique key: a message applied twice shows up as two rows.
	_, err = pool.Exec(t.Context(), "CREATE TABLE "+b.effects+" (consumer text NOT NULL, message_id text NOT NULL)")
	require.NoError(t, err)
	return b
}

// effect is a handler that records one business change for the message.
func (b *testBundle) effect(consumer, id string) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+b.effects+" VALUES ($1, $2)", consumer, id)
		return err
	}
}

// apply applies one message in a transaction of its own and commits it.
func (b *testBundle) apply(t *testing.T, consumer, id string) bool {
	t.Helper()
	var applied bool
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		var err error
		applied, err = b.ib.Apply(t.Context(), tx, consumer, id, b.effect(consumer, id))
		return err
	})
	require.NoError(t, err)
	return applied
}

func (b *testBundle) effectCount(t *testing.T, consumer, id string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT count(*) FROM "+b.effects+" WHERE consumer = $1 AND message_id = $2", consumer, id).Scan(&n))
	return n
}

func (b *testBundle) recorded(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT consumer || '/' || message_id FROM "+b.quoted+" ORDER BY 1")
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return got
}

// searchPathPool returns a pool whose unqualified names resolve in schema.
func searchPathPool(t *testing.T, schema string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// backendPID returns the server process of conn.
func backendPID(t *testing.T, conn *pgxpool.Conn) int32 {
	t.Helper()
	var pid int32
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// requireWaitingOnLock waits until the backend pid is blocked on a lock.
func requireWaitingOnLock(t *testing.T, pool *pgxpool.Pool, pid int32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting bool
		err := pool.QueryRow(t.Context(),
			"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)", pid).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 5*time.Millisecond, "the second delivery should wait on the first one's uncommitted row")
}

type applyResult struct {
	applied bool
	err     error
}

func receive(t *testing.T, ch <-chan applyResult) applyResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("the second delivery did not return")
		return applyResult{}
	}
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("RejectsMalformedNames", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{
			"a.b.c", ".b", "a.", "bad\xffutf8", "nul\x00byte",
			strings.Repeat("n", 52), strings.Repeat("s", 64) + ".x",
		} {
			_, err := inbox.New(name)
			require.Error(t, err, "%q", name)
			require.ErrorContains(t, err, "inbox:")
		}
	})

	t.Run("AcceptsLongestName", func(t *testing.T) {
		t.Parallel()
		pool := testdb.Pool(t)
		schema := testdb.NewSchema(t)
		// The index name, table name + "_received_at", is exactly 63 bytes:
		// not truncated, so it is found under its full name.
		name := strings.Repeat("n", 51)
		ib, err := inbox.New(schema + "." + name)
		require.NoError(t, err)
		require.NoError(t, ib.Migrate(t.Context(), pool))
		var found bool
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL",
			pgx.Identifier{schema, name + "_received_at"}.Sanitize()).Scan(&found))
		require.True(t, found)
	})

	t.Run("DefaultTable", func(t *testing.T) {
		t.Parallel()
		schema := testdb.NewSchema(t)
		pool := searchPathPool(t, schema)
		ib, err := inbox.New("")
		require.NoError(t, err)
		require.NoError(t, ib.Migrate(t.Context(), pool))
		var found bool
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL",
			pgx.Identifier{schema, inbox.TableDefault}.Sanitize()).Scan(&found))
		require.True(t, found)
	})

	t.Run("QuotesHostileNames", func(t *testing.T) {
		t.Parallel()
		pool := testdb.Pool(t)
		schema := testdb.NewSchema(t)
		name := `we"ird; DROP TABLE x;-- {{table}}`
		ib, err := inbox.New(schema + "." + name)
		require.NoError(t, err)
		require.NoError(t, ib.Migrate(t.Context(), pool))
		var applied bool
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			applied, err = ib.Apply(t.Context(), tx, "c", "m", func(context.Context, pgx.Tx) error { return nil })
			return err
		}))
		require.True(t, applied)
		var n int
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{schema, name}.Sanitize()).Scan(&n))
		require.Equal(t, 1, n)
		_, err = ib.Purge(t.Context(), pool, time.Hour, 0)
		require.NoError(t, err)
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentAndRepeated", func(t *testing.T) {
		t.Parallel()
		pool := testdb.Pool(t)
		schema := testdb.NewSchema(t)
		ib, err := inbox.New(schema + ".inbox")
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() { errs <- ib.Migrate(t.Context(), pool) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, ib.Migrate(t.Context(), pool))

		rows, err := pool.Query(t.Context(),
			"SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = 'inbox' ORDER BY indexname", schema)
		require.NoError(t, err)
		defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Len(t, defs, 2)
		require.Contains(t, defs[0], "(consumer, message_id)") // inbox_pkey
		require.Contains(t, defs[1], "(received_at)")          // inbox_received_at
	})

	t.Run("CreatesSchema", func(t *testing.T) {
		t.Parallel()
		pool := testdb.Pool(t)
		schema := testdb.NewSchema(t)
		// The test's cleanup drops the schema again once Migrate recreated it.
		_, err := pool.Exec(t.Context(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize())
		require.NoError(t, err)
		ib, err := inbox.New(schema + ".inbox")
		require.NoError(t, err)
		require.NoError(t, ib.Migrate(t.Context(), pool))
		var found bool
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL",
			pgx.Identifier{schema, "inbox"}.Sanitize()).Scan(&found))
		require.True(t, found)
	})
}

func TestApply(t *testing.T) {
	t.Parallel()

	t.Run("AppliesOnceAcrossRedeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.True(t, b.apply(t, "billing", "42"))
		require.False(t, b.apply(t, "billing", "42"))
		require.False(t, b.apply(t, "billing", "42"))
		require.True(t, b.apply(t, "billing", "43"))
		require.Equal(t, 1, b.effectCount(t, "billing", "42"))
		require.Equal(t, 1, b.effectCount(t, "billing", "43"))
		require.Equal(t, []string{"billing/42", "billing/43"}, b.recorded(t))
	})

	t.Run("NamespacedIDsAreDistinct", func(t *testing.T) {
		// Two outbox tables with their own --id-namespace both send row 42:
		// the inbox keys on what the sink sent, so neither is a duplicate.
		t.Parallel()
		b := setup(t)
		require.True(t, b.apply(t, "billing", "orders:42"))
		require.True(t, b.apply(t, "billing", "payments:42"))
		require.False(t, b.apply(t, "billing", "orders:42"))
		require.Equal(t, 1, b.effectCount(t, "billing", "orders:42"))
		require.Equal(t, 1, b.effectCount(t, "billing", "payments:42"))
	})

	t.Run("ConsumersAreIndependent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.True(t, b.apply(t, "billing", "42"))
		require.True(t, b.apply(t, "shipping", "42"))
		require.False(t, b.apply(t, "shipping", "42"))
		require.Equal(t, 1, b.effectCount(t, "billing", "42"))
		require.Equal(t, 1, b.effectCount(t, "shipping", "42"))
	})

	t.Run("DuplicateInSameTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			applied, err := b.ib.Apply(t.Context(), tx, "c", "m", b.effect("c", "m"))
			require.NoError(t, err)
			require.True(t, applied)
			applied, err = b.ib.Apply(t.Context(), tx, "c", "m", b.effect("c", "m"))
			require.NoError(t, err)
			require.False(t, applied)
			return nil
		}))
		require.Equal(t, 1, b.effectCount(t, "c", "m"))
	})

	t.Run("HandlerErrorThenRollbackLetsRedeliveryApply", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		boom := errors.New("downstream rejected")
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		applied, err := b.ib.Apply(t.Context(), tx, "c", "m", func(ctx context.Context, tx pgx.Tx) error {
			if err := b.effect("c", "m")(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Same(t, boom, err, "the handler's error comes back unwrapped")
		require.False(t, applied)
		require.NoError(t, tx.Rollback(t.Context()))
		require.Empty(t, b.recorded(t))
		require.Zero(t, b.effectCount(t, "c", "m"))

		require.True(t, b.apply(t, "c", "m"))
		require.Equal(t, 1, b.effectCount(t, "c", "m"))
	})

	t.Run("RejectsBadArguments", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		called := false
		h := func(context.Context, pgx.Tx) error { called = true; return nil }
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(t.Context()) //nolint:errcheck // test cleanup
		for _, c := range []struct {
			consumer, id string
			h            func(context.Context, pgx.Tx) error
			want         string
		}{
			{"", "m", h, "consumer is empty"},
			{"c", "", h, "message id is empty"},
			{"c", "m", nil, "handler is nil"},
		} {
			applied, err := b.ib.Apply(t.Context(), tx, c.consumer, c.id, c.h)
			require.ErrorContains(t, err, c.want)
			require.False(t, applied)
		}
		require.False(t, called)
		require.NoError(t, tx.Commit(t.Context()))
		require.Empty(t, b.recorded(t))
	})

	t.Run("MissingTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ib, err := inbox.New(b.schema + ".missing")
		require.NoError(t, err)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(t.Context()) //nolint:errcheck // test cleanup
		_, err = ib.Apply(t.Context(), tx, "c", "m", b.effect("c", "m"))
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "42P01", pgErr.Code)
		require.ErrorContains(t, err, `recording message "m" for consumer "c"`)
	})
}

// TestApplyConcurrentDuplicates proves that of two transactions delivering
// the same message at once, exactly one applies it: the second waits on the
// first's uncommitted inbox row and follows its outcome.
func TestApplyConcurrentDuplicates(t *testing.T) {
	t.Parallel()

	for _, c := range []struct {
		name          string
		firstCommits  bool
		secondApplies bool
	}{
		{name: "FirstCommitsSecondSeesDuplicate", firstCommits: true, secondApplies: false},
		{name: "FirstRollsBackSecondApplies", firstCommits: false, secondApplies: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()

			tx1, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			defer tx1.Rollback(ctx) //nolint:errcheck // test cleanup
			applied, err := b.ib.Apply(ctx, tx1, "c", "m", b.effect("c", "m"))
			require.NoError(t, err)
			require.True(t, applied)

			conn2, err := b.pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn2.Release()
			pid2 := backendPID(t, conn2)
			tx2, err := conn2.Begin(ctx)
			require.NoError(t, err)
			defer tx2.Rollback(ctx) //nolint:errcheck // test cleanup
			done := make(chan applyResult, 1)
			go func() {
				applied, err := b.ib.Apply(ctx, tx2, "c", "m", b.effect("c", "m"))
				done <- applyResult{applied, err}
			}()

			requireWaitingOnLock(t, b.pool, pid2)
			select {
			case r := <-done:
				t.Fatalf("the second delivery returned %+v before the first one ended", r)
			default:
			}
			if c.firstCommits {
				require.NoError(t, tx1.Commit(ctx))
			} else {
				require.NoError(t, tx1.Rollback(ctx))
			}
			r := receive(t, done)
			require.NoError(t, r.err)
			require.Equal(t, c.secondApplies, r.applied)
			require.NoError(t, tx2.Commit(ctx))

			require.Equal(t, 1, b.effectCount(t, "c", "m"))
			require.Equal(t, []string{"c/m"}, b.recorded(t))
		})
	}

	t.Run("ManyAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		pool := testdb.NewPool(t, 8)
		const deliveries = 8
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			applied int
			start   = make(chan struct{})
			errs    = make(chan error, deliveries)
		)
		for range deliveries {
			wg.Go(func() {
				<-start
				errs <- pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
					ok, err := b.ib.Apply(t.Context(), tx, "c", "m", b.effect("c", "m"))
					if ok {
						mu.Lock()
						applied++
						mu.Unlock()
					}
					return err
				})
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, 1, applied)
		require.Equal(t, 1, b.effectCount(t, "c", "m"))
	})

	t.Run("RepeatableReadLoserGetsSerializationFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := t.Context()
		rr := pgx.TxOptions{IsoLevel: pgx.RepeatableRead}

		tx1, err := b.pool.BeginTx(ctx, rr)
		require.NoError(t, err)
		defer tx1.Rollback(ctx) //nolint:errcheck // test cleanup
		applied, err := b.ib.Apply(ctx, tx1, "c", "m", b.effect("c", "m"))
		require.NoError(t, err)
		require.True(t, applied)

		conn2, err := b.pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn2.Release()
		pid2 := backendPID(t, conn2)
		tx2, err := conn2.BeginTx(ctx, rr)
		require.NoError(t, err)
		defer tx2.Rollback(ctx) //nolint:errcheck // test cleanup
		done := make(chan applyResult, 1)
		go func() {
			applied, err := b.ib.Apply(ctx, tx2, "c", "m", b.effect("c", "m"))
			done <- applyResult{applied, err}
		}()
		requireWaitingOnLock(t, b.pool, pid2)
		require.NoError(t, tx1.Commit(ctx))

		r := receive(t, done)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, r.err, &pgErr)
		require.Equal(t, "40001", pgErr.Code)
		require.False(t, r.applied)
		require.NoError(t, tx2.Rollback(ctx))

		// The retry the documentation prescribes sees the message as applied.
		require.NoError(t, pgx.BeginTxFunc(ctx, b.pool, rr, func(tx pgx.Tx) error {
			applied, err := b.ib.Apply(ctx, tx, "c", "m", b.effect("c", "m"))
			require.False(t, applied)
			return err
		}))
		require.Equal(t, 1, b.effectCount(t, "c", "m"))
	})
}

func TestApplySQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db, err := sql.Open("pgx", testdb.DSN(t))
	require.NoError(t, err)
	defer db.Close()
	ctx := t.Context()

	effect := func(consumer, id string) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO "+b.effects+" VALUES ($1, $2)", consumer, id)
			return err
		}
	}
	apply := func(consumer, id string, h func(context.Context, *sql.Tx) error) (bool, error) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		applied, err := b.ib.ApplySQL(ctx, tx, consumer, id, h)
		if err != nil {
			require.NoError(t, tx.Rollback())
			return applied, err
		}
		require.NoError(t, tx.Commit())
		return applied, nil
	}

	applied, err := apply("c", "1", effect("c", "1"))
	require.NoError(t, err)
	require.True(t, applied)
	applied, err = apply("c", "1", effect("c", "1"))
	require.NoError(t, err)
	require.False(t, applied)
	require.Equal(t, 1, b.effectCount(t, "c", "1"))

	boom := errors.New("boom")
	applied, err = apply("c", "2", func(context.Context, *sql.Tx) error { return boom })
	require.Same(t, boom, err)
	require.False(t, applied)
	applied, err = apply("c", "2", effect("c", "2"))
	require.NoError(t, err)
	require.True(t, applied, "a rolled-back failure leaves the message to be applied")
	require.Equal(t, []string{"c/1", "c/2"}, b.recorded(t))

	_, err = b.ib.ApplySQL(ctx, nil, "c", "3", effect("c", "3"))
	require.ErrorContains(t, err, "needs a transaction")
	_, err = apply("c", "", effect("c", ""))
	require.ErrorContains(t, err, "message id is empty")
}

func TestPurge(t *testing.T) {
	t.Parallel()

	t.Run("DeletesOnlyOldIdsInBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, id := range []string{"0", "1", "2", "3", "4"} {
			require.True(t, b.apply(t, "c", id))
		}
		_, err := b.pool.Exec(t.Context(),
			"UPDATE "+b.quoted+" SET received_at = now() - interval '2 days' WHERE message_id IN ('0', '1', '2')")
		require.NoError(t, err)

		// Batches of 2 over 3 old ids: the second batch is needed.
		n, err := b.ib.Purge(t.Context(), b.pool, 24*time.Hour, 2)
		require.NoError(t, err)
		require.Equal(t, int64(3), n)
		require.Equal(t, []string{"c/3", "c/4"}, b.recorded(t))

		n, err = b.ib.Purge(t.Context(), b.pool, 24*time.Hour, 0)
		require.NoError(t, err)
		require.Zero(t, n)

		// The documented hazard: past the retention, a redelivery applies
		// again.
		require.True(t, b.apply(t, "c", "0"))
		require.Equal(t, 2, b.effectCount(t, "c", "0"))
		require.False(t, b.apply(t, "c", "3"))
	})

	t.Run("ExactMultipleOfBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, id := range []string{"0", "1", "2", "3"} {
			require.True(t, b.apply(t, "c", id))
		}
		_, err := b.pool.Exec(t.Context(), "UPDATE "+b.quoted+" SET received_at = now() - interval '1 hour'")
		require.NoError(t, err)
		n, err := b.ib.Purge(t.Context(), b.pool, time.Minute, 2)
		require.NoError(t, err)
		require.Equal(t, int64(4), n)
		require.Empty(t, b.recorded(t))
	})

	t.Run("RejectsBadArguments", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.True(t, b.apply(t, "c", "0"))
		_, err := b.ib.Purge(t.Context(), b.pool, 0, 10)
		require.ErrorContains(t, err, "retention must be positive")
		_, err = b.ib.Purge(t.Context(), b.pool, -time.Hour, 10)
		require.ErrorContains(t, err, "retention must be positive")
		_, err = b.ib.Purge(t.Context(), b.pool, time.Hour, -1)
		require.ErrorContains(t, err, "batch must not be negative")
		require.Equal(t, []string{"c/0"}, b.recorded(t))
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := b.ib.Purge(ctx, b.pool, time.Hour, 10)
		require.ErrorIs(t, err, context.Canceled)
	})
}

func TestReplayKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Equal(t, "42", inbox.ReplayKey("42", ""))
	// Recorded under the id alone, a replay of an applied message is a
	// duplicate; under ReplayKey it is applied once more, and only once.
	require.True(t, b.apply(t, "billing", inbox.ReplayKey("42", "")))
	require.False(t, b.apply(t, "billing", "42"))
	require.True(t, b.apply(t, "billing", inbox.ReplayKey("42", "fix-1")))
	require.False(t, b.apply(t, "billing", inbox.ReplayKey("42", "fix-1")))
	require.True(t, b.apply(t, "billing", inbox.ReplayKey("42", "fix-2")))
	require.Equal(t, []string{"billing/42", "billing/42/replay/fix-1", "billing/42/replay/fix-2"}, b.recorded(t))
}
