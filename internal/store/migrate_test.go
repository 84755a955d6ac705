package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/store"
	"github.com/outboxd/outbox/internal/testdb"
)

// TestMigrateCurrentTableTakesNoLock: re-running migrate on a current table
// (every deploy does) reads only the catalog, so it returns at once even
// while another transaction holds the table in ACCESS EXCLUSIVE mode.
// Before, its CREATE INDEX IF NOT EXISTS and DROP/CREATE TRIGGER queued for
// SHARE and ACCESS EXCLUSIVE locks with no timeout, and every producer
// INSERT queued behind them.
func TestMigrateCurrentTableTakesNoLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	holdLock(t, b, "ACCESS EXCLUSIVE")

	// A lock wait would outlast the context: the wait is not retried away.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	res, err := b.st.MigrateWith(ctx, b.pool, store.MigrateOptions{LockTimeout: time.Hour})
	require.NoError(t, err)
	require.Empty(t, res.Steps)
	require.Empty(t, res.SQL)

	t.Run("OlderWakeFunctionIsReplacedWithoutTableLock", func(t *testing.T) {
		// A function from an earlier version carries no version comment.
		b.exec(t, `COMMENT ON FUNCTION `+strings.TrimSuffix(b.st.QuotedTable(), `"`)+`_wake"() IS NULL`)
		res, err := b.st.MigrateWith(ctx, b.pool, store.MigrateOptions{LockTimeout: time.Hour})
		require.NoError(t, err)
		require.Equal(t, []string{"001_create: wake function"}, res.Steps)
	})
}

// holdLock opens a transaction that holds the table in mode until the test
// ends.
func holdLock(t *testing.T, b *testBundle, mode string) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(t.Context(), "LOCK TABLE "+b.st.QuotedTable()+" IN "+mode+" MODE")
	require.NoError(t, err)
	return tx
}

// TestMigrateDryRun: --dry-run prints the SQL a migration would run and
// changes nothing; for a current table it prints nothing.
func TestMigrateDryRun(t *testing.T) {
	t.Parallel()
	t.Run("FreshTable", func(t *testing.T) {
		t.Parallel()
		schema := "dry_" + testdb.NewSchema(t)
		st, err := store.New(schema + ".outbox")
		require.NoError(t, err)
		res, err := st.MigrateWith(t.Context(), testdb.Pool(t), store.MigrateOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, []string{"001_create: schema", "001_create: table", "001_create: ready index",
			"001_create: leased index", "001_create: aggregate index", "001_create: waiters table",
			"001_create: wake function", "001_create: wake trigger", "002_headers: headers column",
			"003_console: dead index", "003_console: audit table", "004_retention: done index",
			"006_uid: uid column", "008_nonempty: non-empty names", "009_attempts: attempts table",
			"010_dispatchers: dispatchers table", "011_pauses: pauses table", "011_pauses: dispatchers flow column"}, res.Steps)
		require.True(t, strings.HasPrefix(res.SQL, "BEGIN;\nSET LOCAL lock_timeout = '2000ms';\n"), res.SQL)
		require.Contains(t, res.SQL, `CREATE SCHEMA IF NOT EXISTS "`+schema+`";`)
		require.Contains(t, res.SQL, `CREATE TABLE IF NOT EXISTS "`+schema+`"."outbox" (`)
		require.NotContains(t, res.SQL, "CONCURRENTLY", "a new table is indexed in the transaction that creates it")
		require.True(t, strings.HasSuffix(res.SQL, "COMMIT;\n"))
		var exists bool
		require.NoError(t, testdb.Pool(t).QueryRow(t.Context(),
			`SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists))
		require.False(t, exists, "a dry run creates nothing")
	})
	t.Run("CurrentTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{DryRun: true})
		require.NoError(t, err)
		require.Empty(t, res.SQL)
		require.Empty(t, res.Steps)
	})
	t.Run("ShardsOfAnEarlierVersion", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.enableShards(t, 2))
		shards := b.st.Table.String() + "_shards"
		b.exec(t, `ALTER TABLE `+shards+` DROP COLUMN isolate_through`)
		res, err := b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, []string{"005_shards: shard isolation column"}, res.Steps)
		_, err = b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{})
		require.NoError(t, err)
		a := b.acquire(t, "A", 2)
		require.Len(t, a, 2, "the shard statements run on the upgraded table")
		res, err = b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{DryRun: true})
		require.NoError(t, err)
		require.Empty(t, res.Steps)
	})
	t.Run("ShardTriggerOfAnEarlierVersion", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status)
		           VALUES ('o', 'a', 'E', '{}', 'dead')`)
		require.NoError(t, b.enableShards(t, 4))
		// The shape an earlier version left: one BEFORE INSERT OR UPDATE
		// trigger, no fill function.
		fill := strings.TrimSuffix(b.st.QuotedTable(), `"`) + `_shard_fill"`
		b.exec(t, `DROP TRIGGER outbox_shard_fill ON {{table}}`)
		b.exec(t, `DROP FUNCTION `+fill+`()`)
		b.exec(t, `DROP TRIGGER outbox_shard ON {{table}}`)
		b.exec(t, `CREATE TRIGGER outbox_shard BEFORE INSERT OR UPDATE ON {{table}}
		           FOR EACH ROW WHEN (NEW.shard IS NULL) EXECUTE FUNCTION `+strings.TrimSuffix(b.st.QuotedTable(), `"`)+`_shard"()`)
		res, err := b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, []string{"007_shard_fill: shard fill function", "007_shard_fill: shard triggers"}, res.Steps)

		_, err = b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{})
		require.NoError(t, err)
		var types []int16
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT array_agg(tgtype ORDER BY tgname) FROM pg_trigger
		    WHERE tgrelid = $1::regclass AND tgname IN ('outbox_shard', 'outbox_shard_fill')`, b.st.QuotedTable()).Scan(&types))
		require.Equal(t, []int16{7, 17}, types, "BEFORE INSERT and AFTER UPDATE, each FOR EACH ROW")

		// The dead row from before shards, retried, gets its shard; a new
		// row gets one at insert.
		b.exec(t, `UPDATE {{table}} SET status = 'pending' WHERE status = 'dead'`)
		b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'b', 'E', '{}')`)
		var without int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+b.st.QuotedTable()+` WHERE shard IS NULL`).Scan(&without))
		require.Zero(t, without)
		var want, got []int32
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT array_agg(((hashtextextended(aggregate_id, 0) & 2147483647) % 4)::int ORDER BY id),
		    array_agg(shard ORDER BY id) FROM `+b.st.QuotedTable()).Scan(&want, &got))
		require.Equal(t, want, got, "the shard of each row is its aggregate's")

		res, err = b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{DryRun: true})
		require.NoError(t, err)
		require.Empty(t, res.Steps)
	})
	t.Run("TableWithEmptyNames", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		valid := func() bool {
			t.Helper()
			var v bool
			require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT convalidated FROM pg_constraint
			    WHERE conrelid = $1::regclass AND conname = 'outbox_nonempty'`, b.st.QuotedTable()).Scan(&v))
			return v
		}
		require.True(t, valid(), "a new table's constraint is validated")
		insert := func(aggType, aggID, event string) error {
			_, err := b.pool.Exec(t.Context(), `INSERT INTO `+b.st.QuotedTable()+
				` (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, '{}')`, aggType, aggID, event)
			return err
		}
		for _, row := range [][3]string{{"", "a", "E"}, {"o", "", "E"}, {"o", "a", ""}} {
			var pe *pgconn.PgError
			require.ErrorAs(t, insert(row[0], row[1], row[2]), &pe, "%q refused", row)
			require.Equal(t, "23514", pe.Code)
			require.Equal(t, "outbox_nonempty", pe.ConstraintName)
		}

		// A table of an earlier version, with two such rows.
		b.exec(t, `ALTER TABLE {{table}} DROP CONSTRAINT outbox_nonempty`)
		require.NoError(t, insert("o", "", "E"))
		require.NoError(t, insert("o", "a", ""))
		require.NoError(t, insert("o", "a", "E"))
		res, err := b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{})
		require.NoError(t, err, "the rows from before do not fail migrate")
		require.Equal(t, []string{"008_nonempty: non-empty names"}, res.Steps)
		require.EqualValues(t, 2, res.EmptyNames)
		require.False(t, valid(), "not validated while rows violate it")
		require.Error(t, insert("o", "", "E"), "new rows are refused at once")
		require.NoError(t, insert("o", "b", "E"))

		b.exec(t, `DELETE FROM {{table}} WHERE aggregate_id = '' OR event_type = ''`)
		res, err = b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{})
		require.NoError(t, err)
		require.Empty(t, res.Steps)
		require.Zero(t, res.EmptyNames)
		require.True(t, valid(), "validated once no row violates it")
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+b.st.QuotedTable()).Scan(&n))
		require.Equal(t, 2, n, "migrate deleted nothing")
	})
	t.Run("TableWithoutUID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `ALTER TABLE {{table}} DROP COLUMN uid`)
		b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')`)
		_, err := b.st.Resolve(t.Context(), b.pool)
		require.ErrorIs(t, err, store.ErrTableOutdated, "a dispatcher refuses a table without uid")
		var before, after uint32
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT pg_relation_filenode($1::regclass)`, b.st.QuotedTable()).Scan(&before))

		res, err := b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"006_uid: uid column"}, res.Steps)
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT pg_relation_filenode($1::regclass)`, b.st.QuotedTable()).Scan(&after))
		require.Equal(t, before, after, "adding the column rewrites nothing")
		b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'a', 'E', '{}')`)
		var withUID, without int
		require.NoError(t, b.pool.QueryRow(t.Context(),
			`SELECT count(uid), count(*) - count(uid) FROM `+b.st.QuotedTable()).Scan(&withUID, &without))
		require.Equal(t, []int{1, 1}, []int{withUID, without}, "the row from before keeps no uid; a new one gets one")
		_, err = b.st.Resolve(t.Context(), b.pool)
		require.NoError(t, err)
	})
	t.Run("OutdatedTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `ALTER TABLE {{table}} DROP COLUMN headers`)
		b.exec(t, `DROP INDEX `+strings.TrimSuffix(b.st.QuotedTable(), `"`)+`_leased"`)
		res, err := b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{DryRun: true, LockTimeout: 300 * time.Millisecond})
		require.NoError(t, err)
		q := b.st.QuotedTable()
		schema, _, _ := strings.Cut(q, ".")
		require.Equal(t, `-- 001_create: leased index
DROP INDEX CONCURRENTLY IF EXISTS `+schema+`."outbox_leased";
CREATE INDEX CONCURRENTLY "outbox_leased" ON `+q+` (lease_until) WHERE status = 'processing';
BEGIN;
SET LOCAL lock_timeout = '300ms';
-- 002_headers: headers column
ALTER TABLE `+q+` ADD COLUMN IF NOT EXISTS headers jsonb;
COMMIT;
`, res.SQL)
		_, err = b.st.Resolve(t.Context(), b.pool)
		require.ErrorIs(t, err, store.ErrTableOutdated, "a dry run changes nothing")

		// A concurrent build waits for every older snapshot in the database,
		// other tests' included: TestMigrateBuildsIndexConcurrentlyOnLiveTable
		// runs one in a database of its own.
		b.exec(t, `CREATE INDEX "outbox_leased" ON {{table}} (lease_until) WHERE status = 'processing'`)
		res, err = b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{})
		require.NoError(t, err)
		require.Equal(t, []string{"002_headers: headers column"}, res.Steps)
		_, err = b.st.Resolve(t.Context(), b.pool)
		require.NoError(t, err)
		res, err = b.st.MigrateWith(t.Context(), b.pool, store.MigrateOptions{DryRun: true})
		require.NoError(t, err)
		require.Empty(t, res.SQL)
	})
}

// TestMigrateWaitsWithLockTimeout: a step that needs ACCESS EXCLUSIVE while
// a reader holds the table waits at most the lock timeout at a time, says
// whom it waits for, lets producers write between its tries, and completes
// once the reader ends. Before, it waited with no timeout and every
// producer INSERT queued behind it.
func TestMigrateWaitsWithLockTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `ALTER TABLE {{table}} DROP COLUMN headers`)
	reader := holdLock(t, b, "ACCESS SHARE")
	var readerPID int32
	require.NoError(t, reader.QueryRow(t.Context(), "SELECT pg_backend_pid()").Scan(&readerPID))

	logs := newLogRecorder()
	migrated := make(chan error, 1)
	go func() {
		_, err := b.st.MigrateWith(context.Background(), b.pool,
			store.MigrateOptions{LockTimeout: 50 * time.Millisecond, Logger: logs.logger()})
		migrated <- err
	}()
	rec := logs.next(t, "migrate: waiting for a lock")
	require.NotContains(t, rec, "001_create", "only the missing step is applied")
	require.Contains(t, rec, "002_headers: headers column")
	require.Contains(t, rec, fmt.Sprintf("pid %d (AccessShareLock, idle in transaction", readerPID), "it names whom it waits for")

	// A producer is not stuck behind the waiting migration.
	insertWithin(t, b, 3*time.Second)

	require.NoError(t, reader.Rollback(t.Context()))
	select {
	case err := <-migrated:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		require.FailNow(t, "migrate did not finish after the reader ended")
	}
	_, err := b.st.Resolve(t.Context(), b.pool)
	require.NoError(t, err, "the column was added")
}

// TestMigrateBuildsIndexConcurrentlyOnLiveTable: an index missing from a
// live table is built CONCURRENTLY, so producers keep inserting while the
// build waits for an open writer. Before, a plain CREATE INDEX queued for a
// SHARE lock behind the writer, and every INSERT queued behind it.
func TestMigrateBuildsIndexConcurrentlyOnLiveTable(t *testing.T) {
	t.Parallel()
	// A concurrent build waits for every transaction of its database that
	// holds an older snapshot: a database of its own keeps other tests'
	// transactions out of its way.
	pool := ownDatabase(t)
	st, err := store.New("public.outbox")
	require.NoError(t, err)
	require.NoError(t, st.Migrate(t.Context(), pool))
	b := &testBundle{pool: pool, st: st, table: "public.outbox"}
	b.enqueueN(t, 5)
	b.exec(t, `DROP INDEX `+strings.TrimSuffix(b.st.QuotedTable(), `"`)+`_ready"`)
	writer, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer writer.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	_, err = writer.Exec(t.Context(), b.st.InsertSQL(1), "o", "w", "e", `{}`, nil)
	require.NoError(t, err)

	logs := newLogRecorder()
	migrated := make(chan error, 1)
	go func() {
		_, err := b.st.MigrateWith(context.Background(), b.pool, store.MigrateOptions{Logger: logs.logger()})
		migrated <- err
	}()
	logs.next(t, "migrate: building an index concurrently")
	require.Eventually(t, func() bool {
		var waiting bool
		err := b.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event_type = 'Lock')`).Scan(&waiting)
		return err == nil && waiting
	}, 10*time.Second, 10*time.Millisecond, "the build waits for the open writer")

	insertWithin(t, b, 3*time.Second)

	require.NoError(t, writer.Commit(t.Context()))
	select {
	case err := <-migrated:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		require.FailNow(t, "migrate did not finish after the writer committed")
	}
	var valid bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT indisvalid FROM pg_index
		WHERE indexrelid = to_regclass($1)`, strings.TrimSuffix(b.st.QuotedTable(), `"`)+`_ready"`).Scan(&valid))
	require.True(t, valid)
}

// insertWithin runs a producer INSERT that must complete within d.
func insertWithin(t *testing.T, b *testBundle, d time.Duration) {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	_, err = tx.Exec(t.Context(), "SELECT set_config('statement_timeout', $1, true)", d.String())
	require.NoError(t, err)
	// The columns of every version: the table may predate headers.
	_, err = tx.Exec(t.Context(), "INSERT INTO "+b.st.QuotedTable()+
		" (aggregate_type, aggregate_id, event_type, payload) VALUES ('o', 'p', 'e', '{}')")
	require.NoError(t, err, "a producer INSERT while migrate waits")
	require.NoError(t, tx.Commit(t.Context()))
}

// logRecorder is a slog handler whose records, rendered as text, tests wait
// for.
type logRecorder struct {
	records chan string
}

func newLogRecorder() *logRecorder { return &logRecorder{records: make(chan string, 1000)} }

func (l *logRecorder) logger() *slog.Logger { return slog.New(l) }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &attrHandler{l: l, attrs: attrs}
}
func (l *logRecorder) WithGroup(string) slog.Handler { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	return (&attrHandler{l: l}).Handle(context.Background(), r)
}

type attrHandler struct {
	l     *logRecorder
	attrs []slog.Attr
}

func (h *attrHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *attrHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &attrHandler{l: h.l, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}
func (h *attrHandler) WithGroup(string) slog.Handler { return h }
func (h *attrHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	select {
	case h.l.records <- b.String():
	default:
	}
	return nil
}

// next waits for a record whose text starts with prefix and returns it.
func (l *logRecorder) next(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case r := <-l.records:
			if strings.HasPrefix(r, prefix) {
				return r
			}
		case <-timeout:
			require.FailNow(t, "no log record "+prefix)
		}
	}
}

// ownDatabase creates a database for this test alone, dropped at cleanup,
// and returns a pool on it.
func ownDatabase(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.NewDatabase(t))
	require.NoError(t, err)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the database is dropped
	return pool
}
