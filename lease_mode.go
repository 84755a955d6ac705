package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/store"
)

// leaseMode is how a dispatcher owns the messages it delivers, for one run:
// row leases ([rowLeases]), ordered row leases ([orderedRowLeases]) or
// shard leases ([shardLeases]). The stages call it and never ask which
// one it is: the fetcher claims through it, the completer finalizes
// through it, and its keeper keeps the leases of rows in flight alive.
type leaseMode interface {
	// claim leases up to batch rows. clearWait drops the dispatcher's
	// waiter row: it just woke up, and producers must stop notifying it
	// until it is idle again.
	claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error)
	// deadline is when a row claimed by a statement sent at start stops
	// being trusted: its lease, less a tenth for safety, so local timing
	// errs on the early side of the database's clock.
	deadline(start time.Time) time.Time
	// finalize writes a batch of outcomes in one statement and reports,
	// per write, whether its fence held.
	finalize(ctx context.Context, writes []store.RowWrite) ([]bool, error)
	// settled forgets the rows of a batch once their outcome was written
	// or given up on.
	settled(writes []store.RowWrite)
	// keeper is what keeps the leases of rows in flight alive while their
	// publishes run (heartbeats, shard renewal), run until its ctx is done,
	// through the run's shutdown (run ends first); nil when nothing needs
	// to run.
	keeper(run context.Context, leases *leaseRegistry) func(ctx context.Context)
	// ordered reports whether each aggregate is delivered in id order, so
	// that a finalize may free the next message of an aggregate.
	ordered() bool
	// undelivered reports whether anything deliverable is left: Drain
	// returns once it is not.
	undelivered(ctx context.Context) (bool, error)
	// close gives back what the run holds, once every verdict is written.
	close(ctx context.Context) error
}

// newLeaseMode returns the lease mode cfg asks for, set up for one run. In
// row mode it warns when the table has shards, since dispatchers of the two
// modes on one table deliver the same messages.
func (d *Dispatcher) newLeaseMode(ctx context.Context) (leaseMode, error) {
	n, err := d.store.ShardCount(ctx, d.pool)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	rows := &rowLeases{
		store: d.store, pool: d.pool, owner: d.cfg.Owner, lease: d.cfg.Lease, maxAttempts: d.cfg.MaxAttempts,
		beat: heartbeat{cfg: d.cfg, store: d.store, pool: d.pool, stats: &d.stats, hook: d.hook, log: d.log},
	}
	switch {
	case d.cfg.LeaseMode == LeaseShards && n == 0:
		return nil, fmt.Errorf("outbox: table %s has no shards: enable them first (Admin.EnableShards, outboxd migrate --shards N)", d.store.Table)
	case d.cfg.LeaseMode == LeaseShards:
		switch ok, err := d.store.ShardsCurrent(ctx, d.pool); {
		case err != nil:
			return nil, fmt.Errorf("outbox: %w", err)
		case !ok:
			return nil, fmt.Errorf("outbox: table %s's shards were set up by an earlier version: run outboxd migrate (Admin.Migrate) first", d.store.Table)
		}
		return newShardLeases(d, n), nil
	case n > 0:
		d.log.WarnContext(ctx, "the table has shards but this dispatcher uses row leases: with shard-lease dispatchers on the same table, messages are delivered twice",
			slog.Int("shards", n))
	}
	if d.cfg.Ordered {
		return &orderedRowLeases{rowLeases: rows}, nil
	}
	return rows, nil
}

// rowLeases owns each message by its row: the claim writes the lease (status
// processing, a new lease_version as fencing token, attempts+1) and every
// later write is fenced on it.
type rowLeases struct {
	store       *store.Store
	pool        *pgxpool.Pool
	owner       string
	lease       time.Duration
	maxAttempts int
	// beat is the heartbeat but for the leases it extends (none when
	// HeartbeatInterval is zero).
	beat heartbeat

	buf []store.Row // the claim's rows, reused: the fetcher hands them on before it claims again
}

func (m *rowLeases) params(batch int, clearWait bool) store.ClaimParams {
	return store.ClaimParams{
		Owner: m.owner, Batch: batch, Lease: m.lease, MaxAttempts: m.maxAttempts, ClearWait: clearWait,
	}
}

func (m *rowLeases) claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	rows, now, err := m.store.Claim(ctx, m.pool, m.params(batch, clearWait), m.buf)
	m.buf = rows[:0]
	return rows, now, err
}

func (m *rowLeases) deadline(start time.Time) time.Time { return start.Add(m.lease - m.lease/10) }

// finalize runs the finalize statement. In failpoint builds with
// "in-finalize" armed it runs inside an explicit transaction and hits the
// failpoint before COMMIT, so the suite can crash a worker mid-finalize.
func (m *rowLeases) finalize(ctx context.Context, writes []store.RowWrite) ([]bool, error) {
	if !failpoint.Enabled || !failpoint.Armed("in-finalize") {
		return m.store.Finalize(ctx, m.pool, m.owner, writes)
	}
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	held, err := m.store.Finalize(ctx, tx, m.owner, writes)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("in-finalize")
	return held, tx.Commit(ctx)
}

func (m *rowLeases) settled([]store.RowWrite) {}

func (m *rowLeases) keeper(_ context.Context, leases *leaseRegistry) func(context.Context) {
	if m.beat.cfg.HeartbeatInterval <= 0 {
		return nil
	}
	h := m.beat
	h.leases = leases
	return h.run
}

func (m *rowLeases) ordered() bool { return false }

func (m *rowLeases) undelivered(ctx context.Context) (bool, error) {
	return m.store.Undelivered(ctx, m.pool, m.ordered())
}

func (m *rowLeases) close(context.Context) error { return nil }

// orderedRowLeases are row leases that claim only the head of each
// aggregate, sweeping over the aggregates from where the last claim
// stopped.
type orderedRowLeases struct {
	*rowLeases
	// cursor is where the sweep resumes (nil: at the first aggregate).
	cursor *string
}

func (m *orderedRowLeases) claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	p := m.params(batch, clearWait)
	p.Cursor = m.cursor
	rows, now, cursor, err := m.store.ClaimOrdered(ctx, m.pool, p, m.buf)
	if err == nil {
		m.cursor = cursor
	}
	m.buf = rows[:0]
	return rows, now, err
}

func (m *orderedRowLeases) ordered() bool { return true }

// undelivered does not count rows blocked behind a dead head: only an
// operator can unblock them.
func (m *orderedRowLeases) undelivered(ctx context.Context) (bool, error) {
	return m.store.Undelivered(ctx, m.pool, true)
}
