package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/internal/store"
)

// DB is a pgx pool or connection: what [Admin] needs.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Admin runs the operator's operations on one outbox table: migrate, status,
// the dead-letter workflow and purge.
type Admin struct {
	db     DB
	store  *store.Store
	logger *slog.Logger
	pace   pacer // replay's clock, replaced in tests
}

// NewAdmin returns an Admin for table ("" means "outbox").
func NewAdmin(db DB, table string) (*Admin, error) {
	if table == "" {
		table = TableDefault
	}
	st, err := store.New(table)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	return &Admin{db: db, store: st}, nil
}

// Migrate creates the table, its indexes and its wake-up trigger if
// missing, and upgrades a table of an earlier version. It is idempotent and
// safe to run concurrently (an advisory lock serialises it); on a current
// table it only reads the catalog and takes no lock on the table. See
// [Admin.MigrateWith].
func (a *Admin) Migrate(ctx context.Context) error {
	_, err := a.MigrateWith(ctx, nil)
	return err
}

// EnableShards prepares the table for [LeaseShards] with n shards (1 to
// 4096): a shard table holding each shard's lease and fencing token, a
// members table, and a shard column set at insert from aggregate_id. Run
// it after [Admin.Migrate]; again with the same n it does nothing, and
// another n is refused. Choose n well above the most dispatchers you will
// run (16 per dispatcher is plenty): a shard is the unit they share.
func (a *Admin) EnableShards(ctx context.Context, n int) error {
	tx, err := a.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: enable shards: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if err := a.store.EnableShards(ctx, tx, n); err != nil {
		return fmt.Errorf("outbox: enable shards: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("outbox: enable shards: %w", err)
	}
	return nil
}

// EnableCursors prepares a table with shards ([Admin.EnableShards]) for
// [LeaseCursor]: an xid column recording each row's inserting transaction
// (a column default; producers never set it) with its index, each shard's
// cursor, and the parked table that holds the messages not delivered
// (retries, dead ones, those held back behind them). Unfinished rows are
// delivered by the cursors once it commits; from then on the table is
// relayed by dispatchers in [LeaseCursor] only. Again it does nothing.
// PostgreSQL 13 or later.
func (a *Admin) EnableCursors(ctx context.Context) error {
	tx, err := a.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: enable cursors: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if err := a.store.EnableCursor(ctx, tx); err != nil {
		return fmt.Errorf("outbox: enable cursors: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("outbox: enable cursors: %w", err)
	}
	return nil
}

// DropWakeTrigger removes the table's wake-up trigger: inserts no longer
// notify, and dispatchers find new rows only by polling (as with
// [Config.DisableNotify]). [Admin.Migrate] creates it again. It exists to
// measure what the wake-up costs producers (`outboxd bench --producers`).
func (a *Admin) DropWakeTrigger(ctx context.Context) error {
	if err := a.store.DropWakeTrigger(ctx, a.db); err != nil {
		return fmt.Errorf("outbox: drop wake trigger: %w", err)
	}
	return nil
}

// MigrateLockTimeoutDefault is the default of [MigrateOptions.LockTimeout].
const MigrateLockTimeoutDefault = store.MigrateLockTimeoutDefault

// MigrateOptions tune [Admin.MigrateWith]; nil means the defaults.
type MigrateOptions struct {
	// DryRun changes nothing: the result holds the SQL a migration would
	// run, empty for a current table.
	DryRun bool
	// LockTimeout bounds each wait of a DDL statement for its table lock
	// (while it waits, producers' INSERTs queue behind it). A step that
	// times out is rolled back, logged and retried until ctx ends. Defaults
	// to MigrateLockTimeoutDefault (2s).
	LockTimeout time.Duration
	// Logger is told what the migration applies and what it waits for.
	// nil discards.
	Logger *slog.Logger
}

// MigrateResult is what a migration applied, or with DryRun would apply.
type MigrateResult struct {
	// Steps names each step ("002_headers: headers column"), in order;
	// empty when the table was current.
	Steps []string
	// SQL is the script of those steps as they run: transactions with
	// their lock_timeout, and index builds on a live table CONCURRENTLY.
	SQL string
}

// MigrateWith is [Admin.Migrate] with options: a dry run that prints the
// SQL, a lock timeout, a logger. Each step of each migration checks the
// catalog first and is skipped when its object is in place. A missing
// step runs in a transaction whose lock waits are bounded by LockTimeout
// and retried; an index missing from a table that already exists is built
// CONCURRENTLY, outside any transaction, so producers keep writing.
func (a *Admin) MigrateWith(ctx context.Context, o *MigrateOptions) (*MigrateResult, error) {
	var opts store.MigrateOptions
	if o != nil {
		opts = store.MigrateOptions{DryRun: o.DryRun, LockTimeout: o.LockTimeout, Logger: o.Logger}
	}
	res, err := a.store.MigrateWith(ctx, a.db, opts)
	if err != nil {
		return nil, fmt.Errorf("outbox: migrate: %w", err)
	}
	return &MigrateResult{Steps: res.Steps, SQL: res.SQL}, nil
}

// Status is a snapshot of an outbox table's health. Its JSON form is the
// stable output of `outboxd status --json`.
type Status struct {
	// Counts has every status (pending, processing, done, dead), zero
	// included. Pending, processing and dead are exact; done is exact up to
	// 10,000 and past that the planner's estimate (see DoneEstimated).
	Counts map[string]int64 `json:"counts"`
	// DoneEstimated is true when Counts["done"] is an estimate: more than
	// 10,000 done rows, counted from the planner's row count of the table
	// (as of its last ANALYZE) rather than read.
	DoneEstimated bool `json:"done_estimated"`
	// OldestPendingAgeSeconds is the age of the oldest pending or processing
	// message: the key health figure. Null when nothing is undelivered.
	OldestPendingAgeSeconds *float64 `json:"oldest_pending_age_seconds"`
	// ExpiredLeases counts processing rows whose lease has run out (crashed
	// or stalled workers) and, under shard leases, shard leases that ran
	// out without a takeover. Under shard leases, processing counts the
	// messages being delivered as their dispatchers last reported them
	// (with each shard renewal): no claim is written.
	ExpiredLeases int64 `json:"expired_leases"`
	// Attempts is the histogram of attempts over pending and processing
	// rows, keyed by the attempt count in decimal.
	Attempts map[string]int64 `json:"attempts"`
	// Blocked counts the pending messages behind a dead message of their
	// aggregate (its oldest unfinished one), and those aggregates: when
	// the table is delivered in order (Config.Ordered, shard leases) they
	// wait until an operator retries or skips the dead one
	// ([Admin.Blocked] lists them).
	Blocked BlockedCount `json:"blocked"`
	// Dispatchers are the live dispatchers of the table, idle or busy
	// ([Admin.LiveDispatchers]); empty when none runs.
	Dispatchers []LiveDispatcher `json:"dispatchers"`
	// Pauses are the pauses in force ([Admin.Pause]), the whole table's
	// first; empty when nothing is paused.
	Pauses []Pause `json:"pauses"`
	// Destinations are the destinations the live dispatchers limit or an
	// operator paused, by name, with what the dispatchers reported of
	// them (the backpressure: in flight, waiting for budget).
	Destinations []DestinationStatus `json:"destinations"`
}

// LiveDispatcher is a running dispatcher as it last reported itself: each
// reports every third of its lease (between 1s and 10s), and one unseen
// for three of its reports is no longer listed.
type LiveDispatcher struct {
	Owner     string `json:"owner"`
	Host      string `json:"host"`
	Version   string `json:"version"`
	LeaseMode string `json:"lease_mode"`
	// StartedAt and LastSeen are on the database's clock.
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	// InFlight is how many messages it holds (claimed, publishing or
	// waiting for their write); Delivered1m how many it delivered in the
	// minute before its last report.
	InFlight    int   `json:"in_flight"`
	Delivered1m int64 `json:"delivered_1m"`
	// SinkPaused is whether its sink's breaker is open (the sink said it
	// is unavailable: nothing is claimed but a probe); Destinations what
	// it holds of each limited destination ([DestinationReport]). Both as
	// of its last beat; empty from a dispatcher of an earlier version.
	SinkPaused   bool                `json:"sink_paused"`
	Destinations []DestinationReport `json:"destinations"`
}

// LiveDispatchers lists the live dispatchers of the table, idle or busy, by
// owner. On a standby, which cannot read the table they report to, none.
func (a *Admin) LiveDispatchers(ctx context.Context) ([]LiveDispatcher, error) {
	rows, err := a.store.Dispatchers(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: dispatchers: %w", err)
	}
	out := make([]LiveDispatcher, len(rows))
	for i, r := range rows {
		out[i] = LiveDispatcher{Owner: r.Owner, Host: r.Host, Version: r.Version, LeaseMode: r.LeaseMode,
			StartedAt: r.StartedAt, LastSeen: r.LastSeen, InFlight: r.InFlight, Delivered1m: r.Delivered1m,
			Destinations: []DestinationReport{}}
		var f flowReport
		if r.Flow != nil && json.Unmarshal(r.Flow, &f) == nil {
			out[i].SinkPaused = f.SinkPaused
			if f.Destinations != nil {
				out[i].Destinations = f.Destinations
			}
		}
	}
	return out, nil
}

// BlockedCount is how much waits behind dead heads (see [Status.Blocked]),
// with the first aggregates (StatusBlockedListed), the oldest dead head
// first; the list is left out of the JSON when nothing waits.
type BlockedCount struct {
	Aggregates int64              `json:"aggregates"`
	Messages   int64              `json:"messages"`
	List       []BlockedAggregate `json:"list,omitempty"`
}

// StatusBlockedListed is how many blocked aggregates [Admin.Status] lists.
const StatusBlockedListed = 10

// Status reads the table's health figures: one statement, one more for
// what waits behind dead heads, one for the live dispatchers and one for
// the pauses.
func (a *Admin) Status(ctx context.Context) (*Status, error) {
	st, err := a.store.Status(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: status: %w", err)
	}
	blocked, err := a.store.BlockedAggregates(ctx, a.db, StatusBlockedListed)
	if err != nil {
		return nil, fmt.Errorf("outbox: status: %w", err)
	}
	live, err := a.LiveDispatchers(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: status: %w", err)
	}
	pauses, err := a.store.Pauses(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: status: %w", err)
	}
	out := &Status{Pauses: pausesOf(pauses), Destinations: DestinationsOf(live, pausesOf(pauses)), Counts: st.Counts, DoneEstimated: st.DoneEstimated, ExpiredLeases: st.ExpiredLeases, Attempts: map[string]int64{},
		Blocked: BlockedCount{Aggregates: blocked.Aggregates, Messages: blocked.Messages, List: blockedList(blocked.List)}, Dispatchers: live}
	if st.OldestPendingAge >= 0 {
		s := st.OldestPendingAge.Seconds()
		out.OldestPendingAgeSeconds = &s
	}
	for k, v := range st.Attempts {
		out.Attempts[fmt.Sprint(k)] = v
	}
	return out, nil
}

// DeadMessage is a dead row with its diagnosis.
type DeadMessage struct {
	ID int64 `json:"id"`
	// UID is the message's identity, the key sinks send it under ("" for
	// a row from before the uid column, sent under its id).
	UID           string          `json:"uid"`
	AggregateType string          `json:"aggregate_type"`
	AggregateID   string          `json:"aggregate_id"`
	EventType     string          `json:"event_type"`
	Payload       json.RawMessage `json:"payload"`
	CreatedAt     time.Time       `json:"created_at"`
	Attempts      int             `json:"attempts"`
	LeaseVersion  int64           `json:"lease_version"`
	LastError     string          `json:"last_error"`
}

// DeadList returns up to limit dead messages with id > afterID, oldest first.
func (a *Admin) DeadList(ctx context.Context, afterID int64, limit int) ([]DeadMessage, error) {
	rows, err := a.store.DeadList(ctx, a.db, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: dead list: %w", err)
	}
	out := make([]DeadMessage, len(rows))
	for i, r := range rows {
		out[i] = DeadMessage{
			ID: r.ID, UID: r.UID, AggregateType: r.AggregateType, AggregateID: r.AggregateID, EventType: r.EventType,
			Payload: r.Payload, CreatedAt: r.CreatedAt, Attempts: r.Attempts, LeaseVersion: r.LeaseVersion,
			LastError: r.LastError,
		}
	}
	return out, nil
}

// DeadRetry moves the given dead messages back to pending with a fresh
// attempt budget and wakes the dispatchers. It returns the ids it moved;
// ids that were not dead are not in the result.
func (a *Admin) DeadRetry(ctx context.Context, ids ...int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, errors.New("outbox: dead retry: no ids given")
	}
	return a.deadRetry(ctx, ids)
}

// DeadRetryAll moves every dead message back to pending.
func (a *Admin) DeadRetryAll(ctx context.Context) ([]int64, error) { return a.deadRetry(ctx, nil) }

func (a *Admin) deadRetry(ctx context.Context, ids []int64) ([]int64, error) {
	table, err := a.store.Resolve(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: dead retry: %w", err)
	}
	return a.auditedMove(ctx, AuditDeadRetry, "", ids, func() ([]int64, error) {
		return a.store.DeadRetry(ctx, a.db, ids, table.Channel())
	})
}

// DeadSkip marks dead messages done without delivering them, which unblocks
// an ordered aggregate. It returns the ids it moved.
func (a *Admin) DeadSkip(ctx context.Context, ids ...int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, errors.New("outbox: dead skip: no ids given")
	}
	return a.auditedMove(ctx, AuditDeadSkip, "", ids, func() ([]int64, error) {
		return a.store.DeadSkip(ctx, a.db, ids)
	})
}

// RetryNow makes messages that wait for a later attempt (a retry's backoff,
// a defer) due now, and wakes the dispatchers: an operator who fixed the
// receiver need not wait out the backoff. The attempts used stay used.
// Only messages still waiting move; a message being delivered, delivered
// or dead is left alone. It is audited (actor names who asked; "" for
// none) and returns the ids it moved.
func (a *Admin) RetryNow(ctx context.Context, actor string, ids ...int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, errors.New("outbox: retry now: no ids given")
	}
	table, err := a.store.Resolve(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: retry now: %w", err)
	}
	return a.auditedMove(ctx, AuditRetryNow, actor, ids, func() ([]int64, error) {
		return a.store.RetryNow(ctx, a.db, ids, table.Channel())
	})
}

// auditedMove runs one statement that moves ids (nil: every dead row)
// between an audit row's start and end.
func (a *Admin) auditedMove(ctx context.Context, action, actor string, ids []int64, move func() ([]int64, error)) ([]int64, error) {
	entry := AuditEntry{Action: action, Actor: actor, Filter: Filter{IDs: ids}.Terms()}
	auditID, err := a.auditStart(ctx, entry)
	if err != nil {
		return nil, err
	}
	moved, err := move()
	if err != nil {
		err = fmt.Errorf("outbox: %s: %w", label(action), err)
	}
	n := int64(len(moved))
	entry.Count = n
	if aerr := a.auditEnd(ctx, auditID, entry, &n, err); aerr != nil && err == nil {
		err = aerr
	}
	return moved, err
}

// PurgeOpts tune [Admin.Purge].
type PurgeOpts struct {
	// BatchSize is how many rows one DELETE removes at most. Defaults to 1000.
	BatchSize int
	// Progress, when set, is called after each batch with the running total.
	Progress func(deleted int64)
}

// Purge deletes done messages that finished more than olderThan ago, in
// bounded batches (each its own short transaction), never one giant DELETE.
// It returns how many it deleted.
func (a *Admin) Purge(ctx context.Context, olderThan time.Duration, opts *PurgeOpts) (int64, error) {
	if olderThan < 0 {
		return 0, fmt.Errorf("outbox: purge: older-than must not be negative, got %s", olderThan)
	}
	batch := 1000
	var progress func(int64)
	if opts != nil {
		if opts.BatchSize > 0 {
			batch = opts.BatchSize
		}
		progress = opts.Progress
	}
	switch cursors, err := a.store.CursorEnabled(ctx, a.db); {
	case err != nil:
		return 0, fmt.Errorf("outbox: purge: %w", err)
	case cursors:
		return a.purgeCursors(ctx, olderThan, batch, progress)
	}
	ok, err := a.store.PurgeIndex(ctx, a.db)
	if err != nil {
		return 0, fmt.Errorf("outbox: purge: %w", err)
	}
	if !ok {
		return 0, fmt.Errorf("outbox: purge: %w: the index %s_done the purge reads is missing", ErrTableOutdated, a.store.Table.Name)
	}
	var total int64
	var cursor store.PurgeCursor
	for {
		n, next, err := a.store.PurgeBatch(ctx, a.db, olderThan, cursor, batch)
		if err != nil {
			return total, fmt.Errorf("outbox: purge: %w", err)
		}
		total += n
		if progress != nil && n > 0 {
			progress(total)
		}
		if n < int64(batch) {
			return total, nil
		}
		cursor = next
	}
}

// purgeCursors is Purge under snapshot cursors: the rows delivered (behind
// their shard's cursor, not parked) created more than olderThan ago, read
// in id order a batch at a time until a row too young.
func (a *Admin) purgeCursors(ctx context.Context, olderThan time.Duration, batch int, progress func(int64)) (int64, error) {
	var total, after int64
	for {
		read, deleted, last, young, err := a.store.CursorPurgeBatch(ctx, a.db, olderThan, after, batch)
		if err != nil {
			return total, fmt.Errorf("outbox: purge: %w", err)
		}
		total += deleted
		if progress != nil && deleted > 0 {
			progress(total)
		}
		if young || read < int64(batch) {
			return total, nil
		}
		after = last
	}
}

// UndeliveredTypes returns the distinct (aggregate_type, event_type) pairs
// among pending and processing messages: what a routing table must cover.
func (a *Admin) UndeliveredTypes(ctx context.Context) ([][2]string, error) {
	types, err := a.store.UndeliveredTypes(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: undelivered types: %w", err)
	}
	return types, nil
}

// RunRetention deletes done messages older than olderThan, in bounded
// batches, every interval until ctx ends (the first pass runs at once).
// Several replicas may run it together: their batches skip each other's rows.
// Errors are logged and retried at the next interval.
func (a *Admin) RunRetention(ctx context.Context, olderThan, every time.Duration, logger *slog.Logger) {
	if logger == nil {
		logger = slog.Default()
	}
	service.Every(ctx, every, func() {
		n, err := a.Purge(ctx, olderThan, nil)
		switch {
		case err != nil && ctx.Err() == nil:
			logger.Error("retention purge failed", slog.Any("error", err))
		case n > 0:
			logger.Info("retention purge", slog.Int64("deleted", n), slog.Duration("older_than", olderThan))
		}
	})
}
