package store

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MigrateLockTimeoutDefault bounds each wait of a migration step for a
// table lock. A DDL statement waiting for its lock makes every later
// statement on the table (producer INSERTs included) queue behind it, so
// the wait is kept short and retried rather than left open-ended.
const MigrateLockTimeoutDefault = 2 * time.Second

// MigrateOptions tune MigrateWith. The zero value is a real migration with
// the default lock timeout and no logging.
type MigrateOptions struct {
	// DryRun plans without changing anything: the result holds the SQL a
	// migration would run, "" for a current table. No lock is taken.
	DryRun bool
	// LockTimeout bounds each wait for a table lock; a step that hits it is
	// rolled back, logged, and retried until ctx ends. Defaults to
	// MigrateLockTimeoutDefault.
	LockTimeout time.Duration
	// Logger is told what migrate waits for and what it applies. nil
	// discards.
	Logger *slog.Logger
}

// MigrateResult is what a migration applied or, dry, would apply.
type MigrateResult struct {
	// Steps names each step, "001_create: ready index"; empty when the
	// table was current.
	Steps []string
	// SQL is the script of those steps as they run.
	SQL string
	// EmptyNames counts the rows with an empty aggregate_type,
	// aggregate_id or event_type: while any exists the check constraint
	// refusing them (migration 008) checks new rows only.
	EmptyNames int64
}

// MigrateDB is a pool, from which migrate takes one connection for the run,
// or a single connection. Not a transaction: an index on a live table is
// built CONCURRENTLY, which runs outside any.
type MigrateDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Migrate is MigrateWith with the default options.
func (s *Store) Migrate(ctx context.Context, db MigrateDB) error {
	_, err := s.MigrateWith(ctx, db, MigrateOptions{})
	return err
}

// MigrateWith brings the table to the current version. Each migration step
// first checks the catalog and is skipped when its object is in place, so
// re-running it on a current table takes no table lock at all. Missing
// steps run in order, under a session advisory lock keyed on the table so
// that concurrent migrations serialise: in transactions whose lock waits
// are bounded by LockTimeout and retried, and, on a table that already
// exists, index builds CONCURRENTLY, so producers keep writing meanwhile.
func (s *Store) MigrateWith(ctx context.Context, db MigrateDB, o MigrateOptions) (MigrateResult, error) {
	if o.LockTimeout <= 0 {
		o.LockTimeout = MigrateLockTimeoutDefault
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	conn, release, err := dedicated(ctx, db)
	if err != nil {
		return MigrateResult{}, translate(err)
	}
	defer release()
	if err := checkServerVersion(ctx, conn); err != nil {
		return MigrateResult{}, err
	}
	q, err := s.migrationTarget(ctx, conn)
	if err != nil {
		return MigrateResult{}, err
	}
	log := o.Logger.With(slog.String("table", q.Table.String()))
	if !o.DryRun {
		unlock, err := q.lockMigrations(ctx, db, conn, log)
		if err != nil {
			return MigrateResult{}, err
		}
		defer unlock()
	}
	p, err := q.plan(ctx, conn, o.LockTimeout)
	if err != nil || o.DryRun {
		return p.result(), err
	}
	for _, g := range p.groups {
		if err := p.runWithRetry(ctx, conn, g, log); err != nil {
			return MigrateResult{}, err
		}
	}
	res := p.result()
	if res.EmptyNames, err = q.validateNonEmpty(ctx, conn, o.LockTimeout, log); err != nil {
		return MigrateResult{}, err
	}
	if len(p.groups) > 0 {
		log.Info("migrate: table is current", slog.Int("steps_applied", len(res.Steps)))
	}
	return res, nil
}

// MinServerVersion is the oldest PostgreSQL supported, as
// server_version_num: 15, the oldest release its project still supports.
// The statements need 13 (gen_random_uuid() for the uid column, 11 for
// CREATE TRIGGER ... EXECUTE FUNCTION); the suite runs against 15.
const MinServerVersion = 150000

// ErrServerTooOld reports a PostgreSQL older than MinServerVersion.
var ErrServerTooOld = fmt.Errorf("PostgreSQL is older than %d, the oldest supported release", MinServerVersion/10000)

// checkServerVersion refuses a server older than MinServerVersion before
// migrate changes anything, rather than failing halfway on a function it
// lacks.
func checkServerVersion(ctx context.Context, conn DB) error {
	var v int
	if err := conn.QueryRow(ctx, rawSQL("sql/server_version.sql")).Scan(&v); err != nil {
		return translate(err)
	}
	if v < MinServerVersion {
		return fmt.Errorf("%w (the server is %d.%d): upgrade it", ErrServerTooOld, v/10000, v%10000)
	}
	return nil
}

// dedicated returns one connection for the whole run: the advisory lock is
// held by a session, and every step must run on that session.
func dedicated(ctx context.Context, db MigrateDB) (MigrateDB, func(), error) {
	p, ok := db.(interface {
		Acquire(ctx context.Context) (*pgxpool.Conn, error)
	})
	if !ok {
		return db, func() {}, nil
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c, c.Release, nil
}

// migrationTarget returns the store for the table named with its schema (the
// table's if it exists, else the one an unqualified name is created in),
// after checking its notification channel fits PostgreSQL's limit.
func (s *Store) migrationTarget(ctx context.Context, conn MigrateDB) (*Store, error) {
	schema := s.Table.Schema
	if schema == "" {
		var found *string
		if err := conn.QueryRow(ctx, rawSQL("sql/migrate_schema.sql"), s.Table.ident("")).Scan(&found); err != nil {
			return nil, translate(err)
		}
		if found == nil {
			return nil, errors.New("no schema to create the table in: the search_path names none that exists (name the table SCHEMA.NAME)")
		}
		schema = *found
	}
	if err := checkChannel(Table{Schema: schema, Name: s.Table.Name}); err != nil {
		return nil, err
	}
	return s.Qualified(schema), nil
}

// lockMigrations takes the table's migration lock, saying so when another
// migration holds it, and returns its release. From a pool, a transaction of
// its own holds the lock while conn does the work: it keeps no session
// state, so it works through a transaction pooler, and it takes no snapshot
// a concurrent index build would wait for. A single connection holds a
// session lock instead.
func (s *Store) lockMigrations(ctx context.Context, db, conn MigrateDB, log *slog.Logger) (func(), error) {
	key := lockKey("outboxd migrate " + s.Table.ident(""))
	var holder DB = conn
	tryLock, lock := "sql/migrate_try_lock.sql", "sql/migrate_lock.sql"
	var tx pgx.Tx
	if p, ok := db.(*pgxpool.Pool); ok && p.Config().MaxConns >= 2 {
		var err error
		if tx, err = p.Begin(ctx); err != nil {
			return nil, translate(err)
		}
		holder, tryLock, lock = tx, "sql/migrate_try_xact_lock.sql", "sql/migrate_xact_lock.sql"
	}
	release := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if tx != nil {
			_ = tx.Rollback(ctx)
		} else if _, err := conn.Exec(ctx, rawSQL("sql/migrate_unlock.sql"), key); err != nil {
			closeSession(ctx, conn) // a session lock must not outlive the run in a pool
		}
	}
	if err := acquire(ctx, holder, key, tryLock, lock, log); err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// lockKey is the advisory lock key of a migration lock's name.
func lockKey(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// acquire takes advisory lock key with statement tryLock, and when another
// session holds it says so on log and waits with statement lock.
func acquire(ctx context.Context, holder DB, key int64, tryLock, lock string, log *slog.Logger) error {
	// Simple protocol: an extended-protocol portal would keep its snapshot
	// until the transaction ends, and a concurrent index build waits for
	// every snapshot older than its own, this one included.
	var got bool
	if err := holder.QueryRow(ctx, rawSQL(tryLock), pgx.QueryExecModeSimpleProtocol, key).Scan(&got); err != nil {
		return translate(err)
	}
	if !got {
		if log != nil {
			log.Info("migrate: waiting for another migration of this table to finish")
		}
		if _, err := holder.Exec(ctx, rawSQL(lock), pgx.QueryExecModeSimpleProtocol, key); err != nil {
			return translate(err)
		}
	}
	return nil
}

// LockMigrationTx takes, in tx, the transaction-scoped migration lock of
// name (text naming what is migrated: concurrent migrations of one name
// serialise), the lock the store's own migrations take from a pool. It is
// released when tx ends; a wait for it is said on log (nil: silent).
func LockMigrationTx(ctx context.Context, tx pgx.Tx, name string, log *slog.Logger) error {
	return acquire(ctx, tx, lockKey(name), "sql/migrate_try_xact_lock.sql", "sql/migrate_xact_lock.sql", log)
}

// isLockTimeout reports a statement that gave up waiting for a lock
// (lock_not_available) or was chosen as a deadlock victim: both roll back
// cleanly and are worth another try.
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}

// stepError names the step that failed.
func stepError(st migrationStep, err error) error {
	return fmt.Errorf("migration %s, step %q: %w", st.Migration, st.Name, translate(err))
}

// formatLockTimeout is the lock_timeout setting for d, in milliseconds.
func formatLockTimeout(d time.Duration) string {
	return fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
}

// closeSession closes a pooled connection whose state is unknown, so the
// pool never hands it out again.
func closeSession(ctx context.Context, conn MigrateDB) {
	if c, ok := conn.(*pgxpool.Conn); ok {
		_ = c.Conn().Close(ctx)
	}
}
