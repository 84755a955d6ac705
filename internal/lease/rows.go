package lease

import (
	"context"
	"log/slog"
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
	cfg   Config
	cb    Callbacks
	log   *slog.Logger

	buf []store.Row // the claim's rows, reused: the fetcher hands them on before it claims again
}

func (m *rowLeases) params(batch int, clearWait bool) store.ClaimParams {
	return store.ClaimParams{
		Owner: m.cfg.Owner, Batch: batch, Lease: m.cfg.Lease, MaxAttempts: m.cfg.MaxAttempts, ClearWait: clearWait,
	}
}

func (m *rowLeases) Claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	rows, now, err := m.store.Claim(ctx, m.pool, m.params(batch, clearWait), m.buf)
	m.buf = rows[:0]
	return rows, now, err
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

func (m *rowLeases) Keeper(_ context.Context, leases *Registry) func(context.Context) {
	if m.cfg.HeartbeatInterval <= 0 {
		return nil
	}
	h := &heartbeat{store: m.store, pool: m.pool, cfg: m.cfg, cb: m.cb, log: m.log, leases: leases}
	return h.run
}

func (m *rowLeases) RenewEvery() time.Duration { return m.cfg.RenewEvery() }

func (m *rowLeases) Ordered() bool { return false }

func (m *rowLeases) Undelivered(ctx context.Context) (bool, error) {
	return m.store.Undelivered(ctx, m.pool, m.Ordered())
}

func (m *rowLeases) Close(context.Context) error { return nil }

// orderedRowLeases are row leases that claim only the head of each
// aggregate, sweeping over the aggregates from where the last claim
// stopped.
type orderedRowLeases struct {
	*rowLeases
	// cursor is where the sweep resumes (nil: at the first aggregate).
	cursor *string
}

func (m *orderedRowLeases) Claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	p := m.params(batch, clearWait)
	p.Cursor = m.cursor
	rows, now, cursor, err := m.store.ClaimOrdered(ctx, m.pool, p, m.buf)
	if err == nil {
		m.cursor = cursor
	}
	m.buf = rows[:0]
	return rows, now, err
}

func (m *orderedRowLeases) Ordered() bool { return true }

// Undelivered does not count rows blocked behind a dead head: only an
// operator can unblock them.
func (m *orderedRowLeases) Undelivered(ctx context.Context) (bool, error) {
	return m.store.Undelivered(ctx, m.pool, true)
}
