package outbox

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// fakeMode is a lease mode without a database, for driving one stage
// alone: its claims hand out queued rows, its finalizes answer from held
// and errs, and it records what it was asked.
type fakeMode struct {
	mu      sync.Mutex
	queue   []store.Row
	claimed [][]store.Row
	// claimErrs are returned by the next claims, one each, before any row.
	claimErrs []error
	// finalizeErrs are returned by the next finalizes, one each.
	finalizeErrs []error
	// lostIDs are ids whose fence does not hold.
	lostIDs   map[int64]bool
	finalized [][]store.RowWrite
	settled   []store.RowWrite
	dbNow     time.Time
	trusted   time.Duration
	renew     time.Duration
	ordered   bool
}

var _ lease.Mode = (*fakeMode)(nil)

func (m *fakeMode) Claim(_ context.Context, batch int, _ bool) ([]store.Row, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.claimErrs) > 0 {
		err := m.claimErrs[0]
		m.claimErrs = m.claimErrs[1:]
		return nil, time.Time{}, err
	}
	n := min(batch, len(m.queue))
	rows := append([]store.Row(nil), m.queue[:n]...)
	m.queue = m.queue[n:]
	m.claimed = append(m.claimed, rows)
	return rows, m.dbNow, nil
}

func (m *fakeMode) Deadline(start time.Time) time.Time { return start.Add(m.trusted) }

func (m *fakeMode) Finalize(_ context.Context, writes []store.RowWrite) ([]bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finalized = append(m.finalized, append([]store.RowWrite(nil), writes...))
	if len(m.finalizeErrs) > 0 {
		err := m.finalizeErrs[0]
		m.finalizeErrs = m.finalizeErrs[1:]
		if err != nil {
			return nil, err
		}
	}
	held := make([]bool, len(writes))
	for i, w := range writes {
		held[i] = !m.lostIDs[w.ID]
	}
	return held, nil
}

func (m *fakeMode) Settled(writes []store.RowWrite) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled = append(m.settled, writes...)
}

func (m *fakeMode) Keeper(context.Context) func(context.Context) { return nil }
func (m *fakeMode) RenewEvery() time.Duration                    { return m.renew }
func (m *fakeMode) Ordered() bool                                { return m.ordered }
func (m *fakeMode) Chained() bool                                { return false }
func (m *fakeMode) Sweep()                                       {}
func (m *fakeMode) Due()                                         {}
func (m *fakeMode) Close(context.Context) error                  { return nil }

func (m *fakeMode) Undelivered(context.Context) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.queue) > 0, nil
}

// rowsOf returns n pending rows with ids from first, each of its own
// aggregate, under token 1.
func rowsOf(first int64, n int) []store.Row {
	rows := make([]store.Row, n)
	for i := range rows {
		id := first + int64(i)
		rows[i] = store.Row{ID: id, AggregateType: "order", AggregateID: "a", EventType: "E", Attempts: 1, LeaseVersion: 1}
	}
	return rows
}

// stageConfig is a defaulted config for a stage run alone: a lease long
// enough that the claim sizer never holds a claim back.
func stageConfig(batch, workers int) *Config {
	return (&Config{BatchSize: batch, Workers: workers, Lease: time.Hour, PublishTimeout: time.Second,
		FetchCooldown: time.Millisecond, PollInterval: 20 * time.Millisecond, Owner: "stage-test",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}).WithDefaults()
}

// stageHook records the events a stage fires.
type stageHook struct {
	BaseHook
	claims    atomic.Int64
	claimErrs atomic.Int64
	finalizes chan FinalizeEvent
}

func newStageHook() *stageHook { return &stageHook{finalizes: make(chan FinalizeEvent, 64)} }

func (h *stageHook) OnClaim(ev ClaimEvent) {
	h.claims.Add(1)
	if ev.Err != nil {
		h.claimErrs.Add(1)
	}
}

func (h *stageHook) OnFinalize(ev FinalizeEvent) {
	select {
	case h.finalizes <- ev:
	default:
	}
}

// within fails the test unless done closes within 10 seconds.
func within(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not happen within 10s", what)
	}
}

var errFake = errors.New("fake: connection refused")
