package lease

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/failpoint"
	"github.com/outboxd/outbox/internal/store"
)

// rowLeases owns each message by its row: the claim writes the lease (status
// processing, a new lease_version as fencing token, attempts+1) and every
// later write is fenced on it.
type rowLeases struct {
	store *store.Store
	pool  *pgxpool.Pool
	// db runs the claims and what follows a failed one: the pool, or in
	// tests a connection that loses replies.
	db  store.DB
	cfg Config
	cb  Callbacks
	log *slog.Logger

	// leases is the run's registry: every row claimed and not yet
	// settled is in it (the fetcher registers a claim's rows before it
	// claims again).
	leases *Registry

	buf []store.Row // the claim's rows, reused: the fetcher hands them on before it claims again

	// queue is where an unordered claim starts in the ready queue;
	// expiry, which expired leases a claim looks for.
	queue  queueCursor
	expiry expiryWatch

	// unsure is set when a claim failed: it may have committed with its
	// reply lost, its rows processing under this owner without the
	// dispatcher knowing. They are given back before the next claim.
	// Only the fetcher's goroutine (Claim, then Close) touches it.
	unsure bool
}

func newRowLeases(st *store.Store, pool *pgxpool.Pool, cfg Config, cb Callbacks, log *slog.Logger, leases *Registry) *rowLeases {
	return &rowLeases{store: st, pool: pool, db: pool, cfg: cfg, cb: cb, log: log, leases: leases}
}

func (m *rowLeases) params(batch int, clearWait bool, now time.Time) store.ClaimParams {
	return store.ClaimParams{
		Owner: m.cfg.Owner, Batch: batch, Lease: m.cfg.Lease, MaxAttempts: m.cfg.MaxAttempts, ClearWait: clearWait,
		Expired: m.expiry.next(now),
	}
}

func (m *rowLeases) Claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	if err := m.giveBackLost(ctx); err != nil {
		return nil, time.Time{}, err
	}
	start := m.cfg.Clock.Now()
	p := m.params(batch, clearWait, start)
	p.After = m.queue.from(start, m.cfg.PollInterval, clearWait)
	rows, now, err := m.store.Claim(ctx, m.db, p, m.buf)
	m.unsure = err != nil
	if err == nil {
		m.queue.claimed(batch, rows)
		expired := 0
		for _, r := range rows {
			if r.Ready.IsZero() {
				expired++
			}
		}
		m.looked(p, start, now, expired)
	}
	m.buf = rows[:0]
	return rows, now, err
}

// looked records which expired leases a claim that began at start looked
// for.
func (m *rowLeases) looked(p store.ClaimParams, start, dbNow time.Time, expired int) {
	m.expiry.looked(p.Expired, start, dbNow, m.cfg.PollInterval, m.cfg.Lease, expired, p.Batch)
}

// giveBackLost gives back, after a failed claim, the rows that claim took
// if it committed with its reply lost: every row processing under this
// owner that is not in the registry. A claim the reply of which
// was lost would otherwise hold its rows, and in ordered mode their
// aggregates, for a whole lease.
func (m *rowLeases) giveBackLost(ctx context.Context) error {
	if !m.unsure {
		return nil
	}
	released, err := m.store.ReleaseUntracked(ctx, m.db, m.cfg.Owner, m.leases.IDs())
	if err != nil {
		return err
	}
	m.unsure = false
	if len(released) > 0 {
		m.queue.sweepNext = true // pending again where they were
		m.log.WarnContext(ctx, "gave back the rows of a claim whose reply was lost: pending again, attempt refunded",
			slog.Int("rows", len(released)), slog.Int64("first_id", slices.Min(released)))
	}
	return nil
}

func (m *rowLeases) Deadline(start time.Time) time.Time { return start.Add(m.cfg.trusted()) }

// Finalize runs the finalize statement. In failpoint builds with
// "in-finalize" armed it runs inside an explicit transaction and hits the
// failpoint before COMMIT, so the suite can crash a worker mid-finalize.
func (m *rowLeases) Finalize(ctx context.Context, writes []store.RowWrite) ([]bool, error) {
	if !failpoint.Enabled || !failpoint.Armed("in-finalize") {
		return m.store.Finalize(ctx, m.pool, m.cfg.Owner, writes)
	}
	tx, err := m.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	held, err := m.store.Finalize(ctx, tx, m.cfg.Owner, writes)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("in-finalize")
	return held, tx.Commit(ctx)
}

func (m *rowLeases) Settled([]store.RowWrite) {}

func (m *rowLeases) Keeper(context.Context) func(context.Context) {
	if m.cfg.HeartbeatInterval <= 0 {
		return nil
	}
	h := &heartbeat{store: m.store, pool: m.pool, cfg: m.cfg, cb: m.cb, log: m.log, leases: m.leases}
	return h.run
}

func (m *rowLeases) RenewEvery() time.Duration { return m.cfg.RenewEvery() }

func (m *rowLeases) Ordered() bool { return false }

func (m *rowLeases) Chained() bool { return false }

// Sweep makes the next claim sweep the ready queue from the front: the
// fetcher just registered as a waiter, and a commit made while it was not
// registered notified nobody and may lie behind the rows claimed.
func (m *rowLeases) Sweep() { m.queue.sweepNext = true }

// Due is Sweep: a row lease's claim reads when each row is due from the
// row itself.
func (m *rowLeases) Due() { m.Sweep() }

func (m *rowLeases) Undelivered(ctx context.Context) (bool, error) {
	return m.store.Undelivered(ctx, m.pool, m.Ordered())
}

// Close gives back the rows of a last claim whose reply may have been
// lost, once every verdict is written.
func (m *rowLeases) Close(ctx context.Context) error { return m.giveBackLost(ctx) }

// orderedRowLeases are row leases that claim only the head of each
// aggregate, sweeping over the aggregates from where the last claim
// stopped.
type orderedRowLeases struct {
	*rowLeases
	// cursor is where the sweep resumes (nil: at the first aggregate).
	cursor *string
}

func (m *orderedRowLeases) Claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	if err := m.giveBackLost(ctx); err != nil {
		return nil, time.Time{}, err
	}
	start := m.cfg.Clock.Now()
	p := m.params(batch, clearWait, start)
	p.Cursor = m.cursor
	rows, now, cursor, err := m.store.ClaimOrdered(ctx, m.db, p, m.buf)
	if err == nil {
		m.cursor = cursor
		// The reap is all an ordered claim looks for: its heads with an
		// expired lease are found by the walk over the aggregates.
		m.looked(p, start, now, 0)
	}
	m.unsure = err != nil
	m.buf = rows[:0]
	return rows, now, err
}

func (m *orderedRowLeases) Ordered() bool { return true }

// Undelivered does not count rows blocked behind a dead head: only an
// operator can unblock them.
func (m *orderedRowLeases) Undelivered(ctx context.Context) (bool, error) {
	return m.store.Undelivered(ctx, m.pool, true)
}
