package outbox_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// testBundle is one test's outbox table on the shared test server.
type testBundle struct {
	pool   *pgxpool.Pool
	schema string
	table  string // schema.outbox, as Config.Table and Producer.Table take it
	quoted string // the same, quoted for SQL
	admin  *outbox.Admin
	// cursors: the table is relayed under snapshot cursors, which do not
	// write the status columns: rows and counts are read as the console
	// reads them, with the status derived.
	cursors bool
}

// setup creates a schema for the test and migrates an outbox table in it.
func setup(t testing.TB) *testBundle {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.NewSchema(t)
	b := &testBundle{
		pool:   pool,
		schema: schema,
		table:  schema + ".outbox",
		quoted: pgx.Identifier{schema, "outbox"}.Sanitize(),
	}
	admin, err := outbox.NewAdmin(pool, b.table)
	require.NoError(t, err)
	require.NoError(t, admin.Migrate(t.Context()))
	admin.SetLogger(quietLogger())
	b.admin = admin
	return b
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// dispatcher builds a dispatcher on the bundle's table. Unset fields of cfg
// get test-friendly values: a quiet logger and a 50ms poll, so drains and
// retries do not wait on the 1s default.
func (b *testBundle) dispatcher(t *testing.T, sink outbox.Sink, cfg *outbox.Config) *outbox.Dispatcher {
	t.Helper()
	var c outbox.Config
	if cfg != nil {
		c = *cfg
	}
	c.Table = b.table
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	if c.PollInterval == 0 {
		c.PollInterval = 50 * time.Millisecond
	}
	d, err := outbox.NewDispatcher(b.pool, sink, &c)
	require.NoError(t, err)
	return d
}

// start runs d in the background and stops it when the test ends.
func start(t *testing.T, d *outbox.Dispatcher) {
	t.Helper()
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, d.Stop()) })
}

// drain runs d until nothing is left to deliver, bounded so a hang fails
// the test instead of the whole run.
func drain(t *testing.T, d *outbox.Dispatcher) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	require.NoError(t, d.Drain(ctx))
	require.NoError(t, ctx.Err(), "Drain returned only because its context ended")
}

// enqueue inserts msgs in one committed transaction.
func (b *testBundle) enqueue(t *testing.T, msgs ...outbox.NewMessage) []int64 {
	t.Helper()
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	ids, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	return ids
}

// enqueueN inserts n messages of one aggregate, each payload {"n": i}.
func (b *testBundle) enqueueN(t *testing.T, n int, aggregateID string) []int64 {
	t.Helper()
	return b.enqueue(t, msgs(aggregateID, n)...)
}

// msgs are n messages of one aggregate, each payload {"n": i}.
func msgs(aggregateID string, n int) []outbox.NewMessage {
	out := make([]outbox.NewMessage, n)
	for i := range out {
		out[i] = msg(aggregateID, i)
	}
	return out
}

func msg(aggregateID string, n int) outbox.NewMessage {
	return outbox.NewMessage{
		AggregateType: "order", AggregateID: aggregateID, EventType: "OrderCreated",
		Payload: map[string]int{"n": n},
	}
}

// row is an outbox row as stored.
type row struct {
	ID           int64      `db:"id"`
	Status       string     `db:"status"`
	Attempts     int        `db:"attempts"`
	LeaseOwner   *string    `db:"lease_owner"`
	LeaseUntil   *time.Time `db:"lease_until"`
	LeaseVersion int64      `db:"lease_version"`
	LastError    *string    `db:"last_error"`
	AvailableAt  time.Time  `db:"available_at"`
	CreatedAt    time.Time  `db:"created_at"`
	DoneAt       *time.Time `db:"done_at"`
}

func (r row) lastError() string {
	if r.LastError == nil {
		return ""
	}
	return *r.LastError
}

const rowColumns = "id, status, attempts, lease_owner, lease_until, lease_version, last_error, available_at, created_at, done_at"

func (b *testBundle) row(t *testing.T, id int64) row {
	t.Helper()
	if b.cursors {
		m, err := b.admin.Message(t.Context(), id)
		require.NoError(t, err)
		return rowOf(m.MessageSummary, m.LeaseVersion)
	}
	rows, err := b.pool.Query(t.Context(), "SELECT "+rowColumns+" FROM "+b.quoted+" WHERE id = $1", id)
	require.NoError(t, err)
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[row])
	require.NoError(t, err)
	return r
}

// rowOf is a message as the console reads it, as a row.
func rowOf(m outbox.MessageSummary, version int64) row {
	return row{ID: m.ID, Status: m.Status, Attempts: m.Attempts, LeaseOwner: m.LeaseOwner, LeaseUntil: m.LeaseUntil,
		LeaseVersion: version, LastError: m.LastError, AvailableAt: m.AvailableAt, CreatedAt: m.CreatedAt, DoneAt: m.DoneAt}
}

func (b *testBundle) rows(t *testing.T) []row {
	t.Helper()
	if b.cursors {
		msgs, _, err := b.admin.Messages(t.Context(), outbox.Filter{}, outbox.Page{Limit: 10000})
		require.NoError(t, err)
		out := make([]row, len(msgs))
		for i, m := range msgs {
			out[i] = rowOf(m, 0)
		}
		return out
	}
	rows, err := b.pool.Query(t.Context(), "SELECT "+rowColumns+" FROM "+b.quoted+" ORDER BY id")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	require.NoError(t, err)
	return out
}

// countStatus returns how many rows have status.
func (b *testBundle) countStatus(t *testing.T, status string) int {
	t.Helper()
	if b.cursors {
		c, err := b.admin.Count(t.Context(), outbox.Filter{Status: []string{status}}, true)
		require.NoError(t, err)
		return int(c.N)
	}
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT count(*) FROM "+b.quoted+" WHERE status = $1", status).Scan(&n))
	return n
}

// tryCount is countStatus for Eventually conditions, which run outside the
// test goroutine and so must not call require: an error reads as -1, which
// no condition waits for.
func (b *testBundle) tryCount(status string) int {
	if b.cursors {
		c, err := b.admin.Count(context.Background(), outbox.Filter{Status: []string{status}}, true)
		if err != nil {
			return -1
		}
		return int(c.N)
	}
	var n int
	err := b.pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+b.quoted+" WHERE status = $1", status).Scan(&n)
	if err != nil {
		return -1
	}
	return n
}

// tryQuery reports whether sql, a boolean query, returned true; for
// Eventually conditions, like tryCount.
func (b *testBundle) tryQuery(sql string, args ...any) bool {
	var ok bool
	err := b.pool.QueryRow(context.Background(), sql, args...).Scan(&ok)
	return err == nil && ok
}

func (b *testBundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

// dbNow is the server's clock, the one available_at is written with.
func (b *testBundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT now()").Scan(&now))
	return now
}

// recorder is a sink that records every publish in call order and returns
// what its handler returns (nil when there is none).
type recorder struct {
	mu      sync.Mutex
	msgs    []outbox.Message
	handler func(ctx context.Context, m *outbox.Message) error
	// arrived holds one token once a publish arrived since the last
	// receive: a signal for waitLen, not a count.
	arrived chan struct{}
}

func newRecorder(handler func(ctx context.Context, m *outbox.Message) error) *recorder {
	return &recorder{handler: handler, arrived: make(chan struct{}, 1)}
}

func (r *recorder) Sink() outbox.SinkFunc {
	return func(ctx context.Context, m *outbox.Message) error {
		r.mu.Lock()
		r.msgs = append(r.msgs, *m)
		r.mu.Unlock()
		select {
		case r.arrived <- struct{}{}:
		default:
		}
		if r.handler == nil {
			return nil
		}
		return r.handler(ctx, m)
	}
}

func (r *recorder) Messages() []outbox.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]outbox.Message(nil), r.msgs...)
}

func (r *recorder) IDs() []int64 {
	msgs := r.Messages()
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

func (r *recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// waitLen waits until at least n publishes arrived, woken by each one
// rather than polling, and fails the test after within.
func (r *recorder) waitLen(t *testing.T, n int, within time.Duration, msgAndArgs ...any) {
	t.Helper()
	deadline := time.After(within)
	for r.Len() < n {
		select {
		case <-r.arrived:
		case <-deadline:
			require.FailNow(t, fmt.Sprintf("%d of %d publishes arrived within %s", r.Len(), n, within), msgAndArgs...)
		}
	}
}

// publishCounts counts publishes per id over any number of recorders.
func publishCounts(recs ...*recorder) map[int64]int {
	out := map[int64]int{}
	for _, r := range recs {
		for _, id := range r.IDs() {
			out[id]++
		}
	}
	return out
}

// each returns a map giving every id the count n.
func each(ids []int64, n int) map[int64]int {
	out := make(map[int64]int, len(ids))
	for _, id := range ids {
		out[id] = n
	}
	return out
}

// gate blocks publishes until opened; entered reports each publish that
// reached it.
type gate struct {
	entered chan int64
	open    chan struct{}
	once    sync.Once
}

// newGate's buffer outlasts any test's publishes, so a publish never blocks
// on reporting itself.
func newGate() *gate {
	return &gate{entered: make(chan int64, 1000), open: make(chan struct{})}
}

// wait blocks until the gate opens or ctx ends.
func (g *gate) wait(ctx context.Context, id int64) {
	g.entered <- id
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

func (g *gate) Open() { g.once.Do(func() { close(g.open) }) }

// next waits for the next publish to reach the gate.
func (g *gate) next(t *testing.T) int64 {
	t.Helper()
	select {
	case id := <-g.entered:
		return id
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no publish reached the gate")
		return 0
	}
}

func eventually(t *testing.T, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond, msgAndArgs...)
}

// signals is a Hook that turns the dispatcher's events into channels, so a
// test waits for the event itself instead of polling for its effects.
// Events beyond a channel's buffer are dropped; waits look for the next
// matching event, so a test drains what came before it when it must.
type signals struct {
	outbox.BaseHook
	idle      chan outbox.IdleEvent
	finalizes chan outbox.FinalizeEvent
	settles   chan outbox.SettleEvent
	claims    chan outbox.ClaimEvent
}

func newSignals() *signals {
	return &signals{idle: make(chan outbox.IdleEvent, 256), finalizes: make(chan outbox.FinalizeEvent, 256),
		settles: make(chan outbox.SettleEvent, 256), claims: make(chan outbox.ClaimEvent, 256)}
}

func (s *signals) OnClaim(ev outbox.ClaimEvent) {
	select {
	case s.claims <- ev:
	default:
	}
}

// waitClaims waits for n claim statements to have run.
func (s *signals) waitClaims(t *testing.T, n int, msg string) {
	t.Helper()
	for range n {
		waitFor(t, s.claims, func(outbox.ClaimEvent) bool { return true }, msg)
	}
}

func (s *signals) OnSettle(ev outbox.SettleEvent) {
	select {
	case s.settles <- ev:
	default:
	}
}

// waitSettled waits for a message settled with outcome.
func (s *signals) waitSettled(t *testing.T, outcome outbox.Outcome, msg string) {
	t.Helper()
	waitFor(t, s.settles, func(ev outbox.SettleEvent) bool { return ev.Outcome == outcome }, msg)
}

func (s *signals) OnIdle(ev outbox.IdleEvent) {
	select {
	case s.idle <- ev:
	default:
	}
}

func (s *signals) OnFinalize(ev outbox.FinalizeEvent) {
	select {
	case s.finalizes <- ev:
	default:
	}
}

// waitFor receives from ch until ok accepts an event, or fails the test
// after 10 seconds.
func waitFor[E any](t *testing.T, ch <-chan E, ok func(E) bool, msg string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-ch:
			if ok(ev) {
				return
			}
		case <-deadline:
			require.FailNow(t, msg)
		}
	}
}

// discard drops the events received so far.
func discard[E any](ch <-chan E) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
