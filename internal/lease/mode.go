// Package lease holds the ways a dispatcher owns the messages it delivers:
// row leases (each claimed row carries its lease and fencing token), ordered
// row leases (the same, claiming only the head of each aggregate) and shard
// leases (ownership of whole shards of the table, so a message is written
// once, when it is finalized). Each is a [Mode]; the dispatcher's stages
// claim, finalize and keep leases through it and never ask which one runs.
//
// The package reads and writes the table only through internal/store, and
// reports what the dispatcher counts or tells its hook through [Callbacks].
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/store"
)

// ErrLost reports that a lease is no longer this dispatcher's: a fenced
// write matched no row, or the lease was found lost while its publish ran
// (the publish's context is cancelled with it as the cause). The root
// package exports it as outbox.ErrLeaseLost.
var ErrLost = errors.New("outbox: lease lost")

// Mode is how a dispatcher owns the messages it delivers, for one run.
type Mode interface {
	// Claim leases up to batch rows. clearWait drops the dispatcher's
	// waiter row: it just woke up, and producers must stop notifying it
	// until it is idle again.
	Claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error)
	// Sweep makes the next claim look at every row again, not only past
	// where the claims before it read: the fetcher just registered as a
	// waiter, and a commit made while it was not notified nobody.
	Sweep()
	// Due makes the next claim look at every row again, as Sweep, and
	// forget when each row written back pending was to be due: an
	// operator made messages due earlier (Admin.RetryNow). The reads'
	// own checks keep each aggregate's order.
	Due()
	// Deadline is when a row claimed by a statement sent at start stops
	// being trusted: its lease, less a tenth for safety, so local timing
	// errs on the early side of the database's clock.
	Deadline(start time.Time) time.Time
	// Finalize writes a batch of outcomes in one statement and reports,
	// per write, whether its fence held.
	Finalize(ctx context.Context, writes []store.RowWrite) ([]bool, error)
	// Settled forgets the rows of a batch once their outcome was written
	// or given up on.
	Settled(writes []store.RowWrite)
	// Keeper is what keeps the leases of rows in flight alive while their
	// publishes run (heartbeats, shard renewal), run until its ctx is done,
	// through the run's shutdown (run ends first); nil when nothing needs
	// to run.
	Keeper(run context.Context) func(ctx context.Context)
	// RenewEvery is how often the keeper extends the leases of rows in
	// flight; zero when they are never extended (row leases without
	// heartbeats), so a publish must end inside the lease it was claimed
	// with.
	RenewEvery() time.Duration
	// Ordered reports whether each aggregate is delivered in id order, so
	// that a finalize may free the next message of an aggregate.
	Ordered() bool
	// Chained reports whether a claim may return messages of an aggregate
	// whose earlier messages are still in flight (each row's Prev names
	// the one before it): the dispatcher then delivers an aggregate's
	// messages one after another, each once the one before it was
	// acknowledged.
	Chained() bool
	// Undelivered reports whether anything deliverable is left: Drain
	// returns once it is not.
	Undelivered(ctx context.Context) (bool, error)
	// Close gives back what the run holds, once every verdict is written.
	Close(ctx context.Context) error
}

// Kind names a lease mode.
type Kind uint8

// Lease modes.
const (
	Rows Kind = iota
	Shards
	// Cursors are snapshot cursors on shard leases.
	Cursors
)

// Config is what the lease modes read of the dispatcher's configuration.
type Config struct {
	Kind Kind
	// Ordered delivers each aggregate in id order.
	Ordered     bool
	Owner       string
	Lease       time.Duration
	MaxAttempts int
	// HeartbeatInterval is how often the leases of rows in flight are
	// extended; zero: under row leases never, under shard leases a third
	// of the lease.
	HeartbeatInterval time.Duration
	PublishTimeout    time.Duration
	// PollInterval bounds how long a dispatcher holding fewer than every
	// shard takes to notice free ones.
	PollInterval time.Duration
	// IdlePollMax bounds how far apart the looks at other dispatchers'
	// shares grow while nothing is in flight and the shares are as they
	// should be (see shardLeases.due); PollInterval when zero.
	IdlePollMax time.Duration
	// Window is how many messages one dispatcher may hold at once
	// (claimed, queued, publishing or waiting for their finalize): under
	// shard leases, a takeover from an owner that died delivers that many
	// of the shard's messages one at a time.
	Window int
	// Clock is the time the modes read (the wall clock when nil).
	Clock Clock
}

// Validate reports the first setting the lease modes cannot work with.
func (c *Config) Validate() error {
	switch {
	case c.Owner == "":
		return errors.New("lease: an owner is required")
	case c.Lease <= 0:
		return fmt.Errorf("lease: the lease must be positive, got %s", c.Lease)
	case c.MaxAttempts < 1:
		return fmt.Errorf("lease: max attempts must be positive, got %d", c.MaxAttempts)
	case c.HeartbeatInterval < 0:
		return fmt.Errorf("lease: the heartbeat interval must not be negative, got %s", c.HeartbeatInterval)
	case c.PollInterval <= 0:
		return fmt.Errorf("lease: the poll interval must be positive, got %s", c.PollInterval)
	case c.Window < 1:
		return fmt.Errorf("lease: the window must be positive, got %d", c.Window)
	}
	return nil
}

// RenewEvery is how often the leases of rows in flight are extended while
// their publishes run: every HeartbeatInterval; under shard leases, whose
// renewal always runs, a third of the lease when no interval is set; zero
// (never) under row leases without heartbeats.
func (c *Config) RenewEvery() time.Duration {
	if c.HeartbeatInterval == 0 && c.Kind != Rows {
		return c.Lease / 3
	}
	return c.HeartbeatInterval
}

// trusted is how long a lease taken or extended by a statement is trusted
// from when the statement was sent: the lease less a tenth, so that local
// timing errs on the early side of the database's clock.
func (c *Config) trusted() time.Duration { return c.Lease - c.Lease/10 }

// Beat is one turn of a keeper that ran a statement (a heartbeat or a
// shard renewal), or, with Idle set, one that only found hung publishes.
type Beat struct {
	// Rows is how many leases it extended or tried to; LeaseLost how many
	// were found lost (their publishes are cancelled).
	Rows, LeaseLost int
	// Hung is how many publishes were newly found running past
	// PublishTimeout plus a renewal interval.
	Hung     int
	Idle     bool
	Duration time.Duration
	Err      error
}

// Callbacks are what a mode reports to the dispatcher. Every field may be
// nil.
type Callbacks struct {
	// Beat reports each turn of the keeper.
	Beat func(Beat)
	// Hung reports a publish newly found hung (a sink that ignores its
	// context): its lease is no longer kept.
	Hung func(store.Lease)
	// Buried reports a message a shard takeover wrote dead, having crashed
	// its dispatchers until it had no attempt left; cause is the error
	// recorded.
	Buried func(ctx context.Context, id, token int64, cause error)
	// Taken reports that shards were taken: their rows are waiting.
	Taken func()
}

func (cb *Callbacks) beat(b Beat) {
	if cb.Beat != nil {
		cb.Beat(b)
	}
}

func (cb *Callbacks) hung(l store.Lease) {
	if cb.Hung != nil {
		cb.Hung(l)
	}
}

func (cb *Callbacks) buried(ctx context.Context, id, token int64, cause error) {
	if cb.Buried != nil {
		cb.Buried(ctx, id, token, cause)
	}
}

func (cb *Callbacks) taken() {
	if cb.Taken != nil {
		cb.Taken()
	}
}

// New returns the mode cfg asks for, set up for one run against st's
// table; leases is the run's registry, which the fetcher fills and the
// completer empties, and whose leases the mode's keeper keeps. In row mode it warns when the table has shards, since dispatchers
// of the two modes on one table deliver the same messages.
func New(ctx context.Context, st *store.Store, pool *pgxpool.Pool, leases *Registry, cfg Config, cb Callbacks, log *slog.Logger) (Mode, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n, err := st.ShardCount(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	switch {
	case cfg.Kind == Cursors && n == 0:
		return nil, fmt.Errorf("outbox: table %s has no snapshot cursors: enable them first (Admin.EnableCursors, outboxd migrate --shards N --cursor)", st.Table)
	case cfg.Kind == Shards && n == 0:
		return nil, fmt.Errorf("outbox: table %s has no shards: enable them first (Admin.EnableShards, outboxd migrate --shards N)", st.Table)
	case cfg.Kind != Rows:
		switch ok, err := st.ShardsCurrent(ctx, pool); {
		case err != nil:
			return nil, fmt.Errorf("outbox: %w", err)
		case !ok:
			return nil, fmt.Errorf("outbox: table %s's shards were set up by an earlier version: run outboxd migrate (Admin.Migrate) first", st.Table)
		}
		cursors, err := st.CursorEnabled(ctx, pool)
		switch {
		case err != nil:
			return nil, fmt.Errorf("outbox: %w", err)
		case cfg.Kind == Cursors && !cursors:
			return nil, fmt.Errorf("outbox: table %s has no snapshot cursors: enable them first (Admin.EnableCursors, outboxd migrate --shards N --cursor)", st.Table)
		case cfg.Kind == Shards && cursors:
			return nil, fmt.Errorf("outbox: table %s has snapshot cursors: run its dispatchers with the cursor lease mode (shard leases would deliver every message again)", st.Table)
		case cfg.Kind == Cursors:
			return newCursorLeases(st, pool, cfg, cb, log, n, leases), nil
		}
		return newShardLeases(st, pool, cfg, cb, log, n, leases), nil
	case n > 0:
		switch cursors, err := st.CursorEnabled(ctx, pool); {
		case err != nil:
			return nil, fmt.Errorf("outbox: %w", err)
		case cursors:
			return nil, fmt.Errorf("outbox: table %s has snapshot cursors: run its dispatchers with the cursor lease mode (row leases would deliver every message again)", st.Table)
		}
		log.WarnContext(ctx, "the table has shards but this dispatcher uses row leases: with shard-lease dispatchers on the same table, messages are delivered twice",
			slog.Int("shards", n))
	}
	rows := newRowLeases(st, pool, cfg, cb, log, leases)
	if cfg.Ordered {
		return &orderedRowLeases{rowLeases: rows}, nil
	}
	return rows, nil
}
