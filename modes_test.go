package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// leaseMode is one way a dispatcher owns what it delivers. The tests in
// this file are one behavioural suite, run against each: what a user
// relies on must not depend on the mode.
type leaseMode struct {
	name    string
	ordered bool // each aggregate delivered in id order
	// unwritten: a delivered message's row is not written (snapshot
	// cursors): it keeps no count of its attempts nor the token it was
	// delivered under.
	unwritten bool
	// bundle sets a test's table up for the mode.
	bundle func(t *testing.T) *testBundle
	// config is cfg in the mode.
	config func(cfg outbox.Config) *outbox.Config
	// expire ends every lease now, as if its holder had died.
	expire func(t *testing.T, b *testBundle)
}

var leaseModes = []leaseMode{
	{
		name:   "Row",
		bundle: func(t *testing.T) *testBundle { return setup(t) },
		config: func(cfg outbox.Config) *outbox.Config { return &cfg },
		expire: expireRowLeases,
	},
	{
		name: "OrderedRow", ordered: true,
		bundle: func(t *testing.T) *testBundle { return setup(t) },
		config: func(cfg outbox.Config) *outbox.Config { cfg.Ordered = true; return &cfg },
		expire: expireRowLeases,
	},
	{
		name: "Shard", ordered: true,
		bundle: func(t *testing.T) *testBundle { return shardBundle(t, 4) },
		config: shardConfig,
		expire: func(t *testing.T, b *testBundle) { b.expireShards(t) },
	},
	{
		name: "Cursor", ordered: true, unwritten: true,
		bundle: func(t *testing.T) *testBundle { return cursorBundle(t, 4) },
		config: func(cfg outbox.Config) *outbox.Config { cfg.Ordered = true; return cursorConfig(cfg) },
		expire: func(t *testing.T, b *testBundle) { b.expireShards(t) },
	},
}

func expireRowLeases(t *testing.T, b *testBundle) {
	t.Helper()
	b.exec(t, "UPDATE "+b.quoted+" SET lease_until = now() - interval '1 second' WHERE status = 'processing'")
}

// forEachMode runs test once per lease mode, in parallel.
func forEachMode(t *testing.T, test func(t *testing.T, m leaseMode)) {
	t.Helper()
	for _, m := range leaseModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			test(t, m)
		})
	}
}

// byAggregate groups delivered ids by aggregate, in delivery order.
func byAggregate(msgs []outbox.Message) map[string][]int64 {
	out := map[string][]int64{}
	for _, m := range msgs {
		out[m.AggregateID] = append(out[m.AggregateID], m.ID)
	}
	return out
}

// Several dispatchers share the work: each message is delivered once, and
// in the ordered modes each aggregate in id order.
func TestModesDeliverOnce(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		want := map[string][]int64{}
		for i := range 6 {
			agg := fmt.Sprint("agg-", i)
			want[agg] = b.enqueueN(t, 10, agg)
		}
		rec := newRecorder(nil)
		var wg sync.WaitGroup
		errs := make([]error, 3)
		for i := range errs {
			d := b.dispatcher(t, rec.Sink(), m.config(outbox.Config{Owner: fmt.Sprint("d", i), Workers: 3, BatchSize: 5}))
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				errs[i] = d.Drain(ctx)
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		var all []int64
		for _, ids := range want {
			all = append(all, ids...)
		}
		require.Equal(t, each(all, 1), publishCounts(rec), "each message once")
		if m.ordered {
			require.Equal(t, want, byAggregate(rec.Messages()), "each aggregate in id order")
		}
		for _, r := range b.rows(t) {
			require.Equal(t, "done", r.Status)
			if !m.unwritten {
				require.Equal(t, 1, r.Attempts, "a done row counts its one delivery")
				require.Positive(t, r.LeaseVersion, "and the token it was delivered under")
			}
		}
	})
}

// A failing message is retried after its backoff and holds back nothing
// but, in the ordered modes, its own aggregate.
func TestModesRetryHoldsBackOnlyItsAggregate(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		a := b.enqueueN(t, 2, "a")
		other := b.enqueueN(t, 3, "b")
		var mu sync.Mutex
		var order []int64
		failed := false
		sink := outbox.SinkFunc(func(_ context.Context, msg *outbox.Message) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, msg.ID)
			if msg.ID == a[0] && !failed {
				failed = true
				return outbox.RetryableAfter(errors.New("receiver busy"), 300*time.Millisecond)
			}
			return nil
		})
		drain(t, b.dispatcher(t, sink, m.config(outbox.Config{})))
		mu.Lock()
		defer mu.Unlock()
		last := map[int64]int{}
		for i, id := range order {
			last[id] = i
		}
		for _, id := range other {
			require.Less(t, last[id], last[a[0]], "the other aggregate went ahead during the backoff")
		}
		if m.ordered {
			require.Less(t, last[a[0]], last[a[1]], "a's successor waited for its head")
		}
		if !m.unwritten {
			require.Equal(t, 2, b.row(t, a[0]).Attempts, "one failed delivery and the one that finished it")
		}
		require.Equal(t, 5, b.countStatus(t, "done"))
	})
}

// A message that fails every time goes dead after MaxAttempts deliveries;
// the others are delivered.
func TestModesPoisonGoesDeadAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		poison := b.enqueueN(t, 1, "p")[0]
		others := b.enqueueN(t, 3, "q")
		rec := newRecorder(func(_ context.Context, msg *outbox.Message) error {
			if msg.ID == poison {
				return errors.New("receiver rejects it")
			}
			return nil
		})
		drain(t, b.dispatcher(t, rec.Sink(), m.config(outbox.Config{MaxAttempts: 3, RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond})))
		r := b.row(t, poison)
		require.Equal(t, "dead", r.Status)
		require.Equal(t, 3, r.Attempts)
		require.Equal(t, 3, publishCounts(rec)[poison], "MaxAttempts deliveries")
		for _, id := range others {
			require.Equal(t, "done", b.row(t, id).Status)
		}
	})
}

// A dispatcher that stalls past its lease is fenced off: another delivers
// the message, and the stalled one's late finalize writes nothing.
func TestModesFencingAfterTakeover(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		ids := b.enqueueN(t, 1, "a")
		g := newGate()
		sig := newSignals()
		stalled := b.dispatcher(t, outbox.SinkFunc(func(ctx context.Context, msg *outbox.Message) error {
			g.wait(ctx, msg.ID)
			return nil
		}), m.config(outbox.Config{Lease: 30 * time.Second, Owner: "stalled", Hook: sig,
			// Once idle nothing wakes it to claim again: under row leases
			// it would take its own expired lease back.
			PollInterval: time.Hour, DisableNotify: true}))
		start(t, stalled)
		require.Equal(t, ids[0], g.next(t))
		waitFor(t, sig.idle, func(outbox.IdleEvent) bool { return true }, "the stalled dispatcher never went idle")

		m.expire(t, b)
		rec := newRecorder(nil)
		drain(t, b.dispatcher(t, rec.Sink(), m.config(outbox.Config{Lease: 30 * time.Second, Owner: "next"})))
		require.Equal(t, ids, rec.IDs(), "the next owner delivered it")
		done := b.row(t, ids[0])
		require.Equal(t, "done", done.Status)

		g.Open()
		sig.waitSettled(t, outbox.OutcomeLeaseLost, "the stalled finalize was not fenced off")
		require.Equal(t, int64(1), stalled.Stats().LeaseLost)
		require.Zero(t, stalled.Stats().Done)
		require.Equal(t, done.LeaseVersion, b.row(t, ids[0]).LeaseVersion, "the row still reads as the next owner wrote it")
	})
}

// A dispatcher stopped gracefully finishes its publishes and gives back
// what it had not started, at once: another dispatcher delivers the rest
// without waiting for a lease (30 s here, longer than the drain may take).
func TestModesReleaseOnStop(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		var ids []int64
		for i := range 4 {
			ids = append(ids, b.enqueueN(t, 3, fmt.Sprint("agg-", i))...)
		}
		g := newGate()
		first := newRecorder(func(ctx context.Context, msg *outbox.Message) error {
			g.wait(ctx, msg.ID)
			return nil
		})
		cfg := outbox.Config{Lease: 30 * time.Second, Workers: 2, BatchSize: 10}
		d := b.dispatcher(t, first.Sink(), m.config(cfg))
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		go func() { stopped <- d.Run(ctx) }()
		g.next(t)
		cancel()
		g.Open()
		require.NoError(t, <-stopped)

		rest := newRecorder(nil)
		drain(t, b.dispatcher(t, rest.Sink(), m.config(cfg)))
		require.Equal(t, each(ids, 1), publishCounts(first, rest), "each message once")
		require.Equal(t, len(ids), b.countStatus(t, "done"))
	})
}

// Drain returns once nothing deliverable is left: in the ordered modes an
// aggregate behind a dead head is not (only an operator can unblock it).
func TestModesDrainPastADeadHead(t *testing.T) {
	t.Parallel()
	forEachMode(t, func(t *testing.T, m leaseMode) {
		b := m.bundle(t)
		a := b.enqueueN(t, 3, "a")
		other := b.enqueueN(t, 2, "b")
		rec := newRecorder(func(_ context.Context, msg *outbox.Message) error {
			if msg.ID == a[0] {
				return outbox.Permanent(errors.New("invalid payload"))
			}
			return nil
		})
		drain(t, b.dispatcher(t, rec.Sink(), m.config(outbox.Config{})))
		require.Equal(t, "dead", b.row(t, a[0]).Status)
		for _, id := range other {
			require.Equal(t, "done", b.row(t, id).Status)
		}
		behind := "done"
		if m.ordered {
			behind = "pending"
		}
		for _, id := range a[1:] {
			require.Equal(t, behind, b.row(t, id).Status)
		}
	})
}
