package outbox

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// newTestFetcher is a fetcher over mode alone: no database, no listener.
func newTestFetcher(cfg *Config, mode lease.Mode, hook Hook, drain bool, out chan *claimed) (*fetcher, *slots, *lease.Registry) {
	capacity := newSlots(cfg.window())
	leases := lease.NewRegistry(nil)
	return &fetcher{
		engine: engine{hook: hook, stats: &counters{}, log: cfg.Logger}, cfg: cfg.fetchConfig(),
		mode: mode, sizer: newClaimSizer(cfg), breaker: &breaker{}, wake: make(chan struct{}), listening: &atomic.Bool{}, dues: newDueTimes(),
		drain: drain, slots: capacity, leases: leases, out: out,
	}, capacity, leases
}

// The fetcher claims in batches no larger than the batch size, takes a
// slot for each row, registers each lease until the mode's deadline for a
// claim sent then, hands the rows over in claim order, and in drain mode
// returns once nothing is held and the mode has nothing left.
func TestFetcherClaimsAndDrains(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(3, 2)
	dbNow := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	mode := &fakeMode{queue: rowsOf(1, 10), dbNow: dbNow, trusted: 42 * time.Minute}
	hook := newStageHook()
	out := make(chan *claimed, cfg.window())
	f, capacity, leases := newTestFetcher(cfg, mode, hook, true, out)

	done := make(chan struct{})
	sent := time.Now()
	go func() {
		defer close(done)
		f.run(context.Background())
	}()
	var got []int64
	for len(got) < 10 {
		var c *claimed
		select {
		case c = <-out:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d rows handed over", len(got))
		}
		got = append(got, c.msg.ID)
		require.Equal(t, dbNow, c.dbNow)
		left := leases.UntilDeadline(c.lease())
		require.Greater(t, left, 41*time.Minute, "registered until the mode's deadline")
		require.LessOrEqual(t, left, 42*time.Minute+time.Since(sent))
		leases.Forget([]store.Lease{c.lease()})
		capacity.give(1) // the completer's part
	}
	within(t, done, "the drain's return")
	require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, got)
	for _, c := range mode.claimed {
		require.LessOrEqual(t, len(c), 3, "a claim is at most a batch")
	}
	require.Zero(t, capacity.inUse())
	require.Equal(t, int64(10), f.stats.claimed.Load())
}

// A failed claim is never fatal: the fetcher backs off and claims again.
func TestFetcherRetriesAFailedClaim(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(5, 1)
	mode := &fakeMode{queue: rowsOf(1, 2), claimErrs: []error{errFake, errFake}, trusted: time.Minute}
	hook := newStageHook()
	out := make(chan *claimed, cfg.window())
	f, capacity, _ := newTestFetcher(cfg, mode, hook, true, out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(context.Background())
	}()
	for range 2 {
		select {
		case <-out:
			capacity.give(1)
		case <-time.After(10 * time.Second):
			t.Fatal("the rows were not handed over after the failed claims")
		}
	}
	within(t, done, "the drain's return")
	require.Equal(t, int64(2), hook.claimErrs.Load(), "both failures reported")
}

// A fetcher whose slots are all taken claims nothing until the completer
// gives some back; once stopped, it returns without claiming again.
func TestFetcherWaitsForRoom(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(2, 1) // a window of 5
	mode := &fakeMode{queue: rowsOf(1, 20), trusted: time.Minute}
	hook := newStageHook()
	out := make(chan *claimed, 20)
	f, capacity, _ := newTestFetcher(cfg, mode, hook, false, out)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(ctx)
	}()
	for range 4 {
		<-out
	}
	// The sizer holds the window at 5 and a claim needs room for a whole
	// batch: with 4 held, the fetcher waits for the completer.
	require.Never(t, func() bool { return len(out) > 0 }, 100*time.Millisecond, 10*time.Millisecond)
	require.LessOrEqual(t, capacity.inUse(), int64(cfg.window()))
	capacity.give(4)
	select {
	case <-out:
	case <-time.After(10 * time.Second):
		t.Fatal("room freed, yet nothing claimed")
	}
	cancel()
	within(t, done, "the fetcher's return on stop")
}

// logLines is a slog handler that keeps each record's level and message.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}

func (l *logLines) atLeast(level slog.Level) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		var lv slog.Level
		if err := lv.UnmarshalText([]byte(strings.Fields(s)[0])); err == nil && lv >= level {
			out = append(out, s)
		}
	}
	return out
}

// An outage is one line as it begins and one as it ends, not a line per
// retry: claims failing over and over with the same error are logged once
// at error level, and the first claim that succeeds says so.
func TestFetcherOutageIsQuiet(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(5, 1)
	logs := &logLines{}
	cfg.Logger = slog.New(logs)
	errs := make([]error, 12)
	for i := range errs {
		errs[i] = errFake
	}
	mode := &fakeMode{queue: rowsOf(1, 1), claimErrs: errs, trusted: time.Minute}
	out := make(chan *claimed, cfg.window())
	f, capacity, _ := newTestFetcher(cfg, mode, newStageHook(), true, out)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(context.Background())
	}()
	select {
	case <-out:
		capacity.give(1)
	case <-time.After(10 * time.Second):
		t.Fatal("the row was not handed over after the outage")
	}
	within(t, done, "the drain's return")
	require.Equal(t, []string{"ERROR claim failed; retrying", "INFO claims succeed again"}, logs.atLeast(slog.LevelInfo))
}

// A registered idle fetcher's polls back off: each poll that finds nothing
// doubles the wait, spread by at most a fifth, up to IdlePollMax; a retry
// it wrote ends the wait when it comes due, and once due starts the
// back-off again from PollInterval.
func TestFetcherIdleBackOff(t *testing.T) {
	t.Parallel()
	cfg := stageConfig(3, 2)
	cfg.PollInterval, cfg.IdlePollMax = time.Second, 10*time.Second
	now := time.Unix(1000, 0)
	f, _, _ := newTestFetcher(cfg, &fakeMode{}, BaseHook{}, false, nil)
	f.clock = func() time.Time { return now }
	f.idleEvery, f.registeredAt = cfg.PollInterval, now

	var grown []time.Duration
	for range 6 {
		grown = append(grown, f.idleEvery)
		wait := f.idleWait()
		require.GreaterOrEqual(t, wait, f.idleEvery*4/5, "spread by at most a fifth")
		require.LessOrEqual(t, wait, f.idleEvery*6/5, "spread by at most a fifth")
		f.backOff(t.Context())
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}, grown)

	f.dues.add(now.Add(1500 * time.Millisecond))
	require.Equal(t, 1500*time.Millisecond, f.idleWait(), "woken when the retry comes due")
	f.backOff(t.Context())
	require.Equal(t, 10*time.Second, f.idleEvery, "not due yet: the back-off goes on")
	now = now.Add(1500 * time.Millisecond)
	require.Zero(t, f.idleWait(), "due now")
	f.backOff(t.Context())
	require.Equal(t, cfg.PollInterval, f.idleEvery, "came due: polled for again soon")
	_, left := f.dues.next()
	require.False(t, left, "forgotten once due")

	// The earliest of the retries written counts, and once it came due
	// the next one: none is forgotten.
	d := newDueTimes()
	d.add(now.Add(5 * time.Second))
	d.add(now.Add(2 * time.Second))
	d.add(now.Add(9 * time.Second))
	next, _ := d.next()
	require.Equal(t, now.Add(2*time.Second), next)
	require.True(t, d.drop(now.Add(3*time.Second)))
	next, _ = d.next()
	require.Equal(t, now.Add(5*time.Second), next, "the later retries are still known")
	require.False(t, d.drop(now.Add(4*time.Second)), "none due yet")
}

// A retry written while a registered idle fetcher sleeps, coming due
// before the sleep would end, ends it then; one coming due later leaves
// the sleep as it is.
func TestFetcherSleepEndsWhenARetryComesDue(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFetcher(stageConfig(3, 2), &fakeMode{}, BaseHook{}, false, nil)
	f.poll = time.NewTimer(time.Hour)
	slept := make(chan bool)
	start := time.Now()
	go func() { slept <- f.sleepIdle(t.Context(), nil, time.Hour, f.dues.soon) }()
	f.dues.add(time.Now().Add(2 * time.Hour)) // later: no change
	f.dues.add(time.Now().Add(100 * time.Millisecond))
	select {
	case ok := <-slept:
		require.True(t, ok)
		require.True(t, f.polled, "ended on its timer, as a poll")
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the sleep did not end when the retry came due")
	}
}
