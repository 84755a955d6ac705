package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/testdb"
)

// shardBundle is a bundle whose table has n shards.
func shardBundle(t *testing.T, n int) *testBundle {
	t.Helper()
	b := setup(t)
	require.NoError(t, b.admin.EnableShards(t.Context(), n))
	return b
}

// shardConfig is cfg under shard leases, ordered: the tests of this file
// deliver each aggregate in order (TestShardLeasesUnordered* clear it).
func shardConfig(cfg outbox.Config) *outbox.Config {
	cfg.LeaseMode, cfg.Ordered = outbox.LeaseShards, true
	return &cfg
}

// shardOwners counts the shards each owner holds.
func (b *testBundle) shardOwners(t *testing.T) map[string]int {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT owner, count(*)::int FROM "+
		pgx.Identifier{b.schema, "outbox_shards"}.Sanitize()+" WHERE owner IS NOT NULL GROUP BY owner")
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var o string
		var n int
		require.NoError(t, rows.Scan(&o, &n))
		out[o] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// expireShards ends every shard lease and membership now, as if their
// owners had died: a dispatcher counts as alive for a lease after it last
// renewed, and takes only its share of the shards meanwhile.
func (b *testBundle) expireShards(t *testing.T) {
	t.Helper()
	b.exec(t, "UPDATE "+pgx.Identifier{b.schema, "outbox_shards"}.Sanitize()+
		" SET lease_until = now() - interval '1 second' WHERE owner IS NOT NULL")
	b.exec(t, "UPDATE "+pgx.Identifier{b.schema, "outbox_shard_members"}.Sanitize()+
		" SET seen = now() - interval '1 hour'")
}

// Each message is delivered once, each aggregate in id order, and the
// shards are free again once the dispatcher stops.
func TestShardLeasesDeliverInOrder(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 4)
	want := map[string][]int64{}
	for _, agg := range []string{"a", "b", "c", "d", "e"} {
		want[agg] = b.enqueueN(t, 10, agg)
	}
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{Workers: 8, BatchSize: 16})))

	got := map[string][]int64{}
	for _, m := range rec.Messages() {
		got[m.AggregateID] = append(got[m.AggregateID], m.ID)
		require.Equal(t, 1, m.Attempt)
	}
	require.Equal(t, want, got, "each aggregate once, in id order")
	require.Equal(t, 50, b.countStatus(t, "done"))
	var held int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+
		pgx.Identifier{b.schema, "outbox_shards"}.Sanitize()+" WHERE owner IS NOT NULL").Scan(&held))
	require.Zero(t, held, "a stopped dispatcher releases its shards")
}

// A failing message holds back its own aggregate only, and counts its
// attempts; a retry is delivered after its backoff.
func TestShardLeasesRetryHoldsBackItsAggregate(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 1)
	a := b.enqueueN(t, 2, "a")
	other := b.enqueueN(t, 1, "b")
	var mu sync.Mutex
	var order []int64
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, m.ID)
		if m.ID == a[0] && m.Attempt == 1 {
			return errors.New("receiver busy")
		}
		return nil
	})
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{RetryBase: 50 * time.Millisecond, RetryCap: 50 * time.Millisecond})))

	require.Equal(t, "done", b.row(t, a[1]).Status)
	mu.Lock()
	defer mu.Unlock()
	first := map[int64]int{}
	for i, id := range order {
		if _, ok := first[id]; !ok {
			first[id] = i
		}
	}
	require.Less(t, first[other[0]], first[a[1]], "b went ahead while a's head backed off")
	require.Equal(t, []int64{a[0], a[1]}, []int64{order[len(order)-2], order[len(order)-1]}, "a's successor after its head's retry")
	// A done row reads as under row leases: its deliveries counted, the
	// one that finished it included, and that delivery's token.
	r := b.row(t, a[0])
	require.Equal(t, 2, r.Attempts, "one failed delivery, then the one that finished it")
	require.Positive(t, r.LeaseVersion)
	require.Equal(t, 1, b.row(t, other[0]).Attempts)
}

// A dispatcher that stalls past its shard leases loses them: the one that
// takes over delivers the stalled message again, and the stalled
// dispatcher's late finalize writes nothing.
func TestShardLeasesTakeoverFencesTheStalledDispatcher(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 2)
	ids := b.enqueueN(t, 1, "a")
	g := newGate()
	stalledSink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		g.wait(ctx, m.ID)
		return nil
	})
	sig := newSignals()
	stalled := b.dispatcher(t, stalledSink, shardConfig(outbox.Config{Lease: 30 * time.Second, Hook: sig}))
	start(t, stalled)
	require.Equal(t, ids[0], g.next(t))

	b.expireShards(t)
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{Lease: 30 * time.Second})))
	require.Equal(t, ids, rec.IDs(), "the new owner delivered it")
	require.Equal(t, "done", b.row(t, ids[0]).Status)

	g.Open()
	sig.waitSettled(t, outbox.OutcomeLeaseLost, "the stalled finalize was not fenced off")
	require.Equal(t, int64(1), stalled.Stats().LeaseLost)
	require.Zero(t, stalled.Stats().Done)
}

// A message that kills every dispatcher delivering it goes dead (a
// dispatcher "dies" with its publish hung; its lease is long enough that
// it does not renew, and so revive, during the test): the first
// death, in normal delivery, charges nobody and isolates the shard; each
// later one, with the message declared alone in flight, costs it an
// attempt, shown to the next delivery. The healthy messages of its shard
// are delivered, and none of them is charged.
func TestShardLeasesPoisonGoesDead(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 1)
	before := b.enqueueN(t, 3, "x")
	poison := b.enqueueN(t, 1, "p")[0]
	after := b.enqueueN(t, 3, "y")
	reached := make(chan struct{}, 10)
	hang := make(chan struct{})
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		if m.ID != poison {
			return nil
		}
		reached <- struct{}{}
		select { // a dispatcher that never comes back from this publish
		case <-hang:
		case <-ctx.Done():
		}
		return errors.New("never returned")
	})
	settled := &settleHook{} // every dispatcher's: any of them may bury the poison
	var attempts []int
	attemptOf := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		if m.ID == poison {
			attempts = append(attempts, m.Attempt) // one publish at a time: each before its death
		}
		return sink(ctx, m)
	})
	cfg := shardConfig(outbox.Config{Lease: 3 * time.Minute, MaxAttempts: 3, Hook: settled})
	for range cfg.MaxAttempts + 1 {
		start(t, b.dispatcher(t, attemptOf, cfg))
		select {
		case <-reached:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the poison message was not delivered")
		}
		// The others were delivered beside it; then that dispatcher dies.
		eventually(t, func() bool { return b.tryCount("done") == 6 })
		b.expireShards(t)
	}
	t.Cleanup(func() { close(hang) })

	drain(t, b.dispatcher(t, attemptOf, cfg))
	r := b.row(t, poison)
	require.Equal(t, "dead", r.Status)
	require.Contains(t, *r.LastError, "died 3 times")
	require.Equal(t, []int{1, 1, 2, 3}, attempts, "each death while alone in flight counts as an attempt")
	// Settled like any other outcome: the hook (and so the metrics) see it.
	ev, ok := settled.of(poison)
	require.True(t, ok, "the buried message reached OnSettle")
	require.Equal(t, outbox.OutcomeDead, ev.Outcome)
	require.Equal(t, "p", ev.Message.AggregateID)
	require.ErrorContains(t, ev.Err, "died 3 times")
	for _, id := range append(before, after...) {
		require.Equal(t, "done", b.row(t, id).Status)
		require.Equal(t, 1, b.row(t, id).Attempts, "no healthy message was charged")
	}
}

// A crash is charged to the message in flight, never to another: here a
// healthy message with a lower id in the poison's shard waits out a retry
// backoff (pending, the shard's oldest, but not in flight) while the poison
// kills dispatcher after dispatcher. The poison goes dead; the healthy one
// is delivered once its backoff ends, uncharged.
func TestShardLeasesCrashChargesOnlyTheMessageInFlight(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 1)
	healthy := b.enqueueN(t, 1, "h")[0]
	poison := b.enqueueN(t, 1, "p")[0]
	failedOnce := make(chan struct{})
	reached := make(chan struct{}, 10)
	hang := make(chan struct{})
	var once sync.Once
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		switch {
		case m.ID == healthy && m.Attempt == 1:
			once.Do(func() { close(failedOnce) })
			return outbox.RetryableAfter(errors.New("receiver busy"), 2*time.Second)
		case m.ID == poison:
			reached <- struct{}{}
			select {
			case <-hang:
			case <-ctx.Done():
			}
			return errors.New("never returned")
		}
		return nil
	})
	cfg := shardConfig(outbox.Config{Lease: 3 * time.Minute, MaxAttempts: 3, Workers: 1, BatchSize: 1})
	for i := range cfg.MaxAttempts + 1 {
		start(t, b.dispatcher(t, sink, cfg))
		if i == 0 {
			<-failedOnce
		}
		select {
		case <-reached:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the poison message was not delivered")
		}
		b.expireShards(t)
	}
	t.Cleanup(func() { close(hang) }) // before the dispatchers stop: cleanups run last first
	rec := newRecorder(sink)
	drain(t, b.dispatcher(t, rec.Sink(), cfg))
	require.Equal(t, "dead", b.row(t, poison).Status)
	h := b.row(t, healthy)
	require.Equal(t, "done", h.Status, "last error %s", h.lastError())
	require.Equal(t, 2, h.Attempts, "its failure and its delivery: no crash charged")
}

// Dispatchers share the shards without a leader: a second one gets half,
// and when it stops the first takes them all back.
func TestShardLeasesBalance(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 8)
	held := func() map[string]int { return b.shardOwners(t) }
	cfg := shardConfig(outbox.Config{Lease: 600 * time.Millisecond, PublishTimeout: 200 * time.Millisecond})
	a := *cfg
	a.Owner = "A"
	start(t, b.dispatcher(t, newRecorder(nil).Sink(), &a))
	eventually(t, func() bool { return held()["A"] == 8 }, "A alone holds every shard")

	second := *cfg
	second.Owner = "B"
	d := b.dispatcher(t, newRecorder(nil).Sink(), &second)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, func() bool { h := held(); return h["A"] == 4 && h["B"] == 4 }, "A and B hold half each")

	cancel()
	require.NoError(t, <-done)
	require.Zero(t, held()["B"], "B released its shards when it stopped")
	eventually(t, func() bool { return held()["A"] == 8 }, "A takes them all back")
}

// A dispatcher beyond its share gives the extra shards back as soon as
// the others are there, not at its next renewal a third of a lease later:
// after an outage the first dispatcher back takes every expired shard,
// and the others must not sit idle until it renews.
func TestShardLeasesNoHoarding(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 8)
	held := func() map[string]int { return b.shardOwners(t) }
	// Renewals every 20 s; the balance must not wait for one.
	cfg := shardConfig(outbox.Config{Lease: time.Minute, PollInterval: 50 * time.Millisecond})
	a := *cfg
	a.Owner = "A"
	start(t, b.dispatcher(t, newRecorder(nil).Sink(), &a))
	eventually(t, func() bool { return held()["A"] == 8 }, "A alone holds every shard")

	second := *cfg
	second.Owner = "B"
	start(t, b.dispatcher(t, newRecorder(nil).Sink(), &second))
	require.Eventually(t, func() bool { h := held(); return h["A"] == 4 && h["B"] == 4 }, 8*time.Second, 20*time.Millisecond,
		"A kept B's share until its next renewal")
}

// A table switched from row to shard leases: rows a row-lease dispatcher
// left processing are delivered once their leases expire.
func TestShardLeasesTakeOverRowLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.enqueueN(t, 2, "a")
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'processing', lease_owner = 'old', lease_version = 1, attempts = 1, "+
		"lease_until = now() - interval '1 second' WHERE id = $1", ids[0])
	require.NoError(t, b.admin.EnableShards(t.Context(), 2))
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{})))
	require.Equal(t, ids, rec.IDs(), "both, in order")
	require.Equal(t, "done", b.row(t, ids[0]).Status)
}

// A dead row from before shards were enabled, retried, is delivered: it
// gets its shard when it comes back to pending.
func TestShardLeasesDeliverRetriedOldDeadRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.enqueueN(t, 1, "a")[0]
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'dead', last_error = 'old' WHERE id = $1", id)
	require.NoError(t, b.admin.EnableShards(t.Context(), 2))
	moved, err := b.admin.DeadRetry(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, []int64{id}, moved)
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{})))
	require.Equal(t, []int64{id}, rec.IDs())
	require.Equal(t, "done", b.row(t, id).Status)
}

// Drain returns in shard mode once nothing deliverable is left: an
// aggregate whose head is dead holds its later messages back, as in
// ordered row mode, and Drain does not wait for them.
func TestShardLeasesDrainSkipsBlockedAggregate(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 4)
	blocked := b.enqueueN(t, 3, "a")
	free := b.enqueueN(t, 5, "b")
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'dead', attempts = 3 WHERE id = $1", blocked[0])
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{})))
	require.Len(t, rec.Messages(), len(free))
	require.Equal(t, 2, b.countStatus(t, "pending"), "held back behind the dead head")
}

// An aggregate's backlog goes out from one read, each message as soon as
// the one before it was acknowledged: no message waits for the finalize of
// the one before it, nor for a poll. (With reads that returned only the
// head of each aggregate, each message waited for its predecessor's
// finalize and for the fetcher to wake after it.)
func TestShardLeasesBacklogFollowsFinalize(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 2)
	// A publish outlasting the fetcher's pause: it goes idle while each
	// message is in flight.
	rec := newRecorder(func(context.Context, *outbox.Message) error { time.Sleep(50 * time.Millisecond); return nil })
	sig := newSignals()
	d := b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{PollInterval: 10 * time.Second, Hook: sig}))
	start(t, d)
	waitIdle(t, sig)
	before := d.Stats().Claimed
	// One commit, one wake-up. The notification is sent by hand, as the
	// trigger would for a registered waiter: the keeper's taking its shards
	// at start wakes the fetcher too, and a wake-up unregisters it until it
	// is idle again, so the trigger may see no waiter (what the test timed
	// out on under CI load, before and after prefix reads).
	tx, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
	_, err = outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, msgs("a", 5)...)
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), "SELECT pg_notify($1, '')", b.schema+".outbox")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(t.Context()))
	rec.waitLen(t, 5, 9*time.Second, "the backlog waited for polls")
	require.Equal(t, before+5, d.Stats().Claimed, "the whole backlog from one read, each message read once")
	var claimsWithRows int
	for {
		select {
		case ev := <-sig.claims:
			if ev.Rows > 0 {
				claimsWithRows++
			}
			continue
		default:
		}
		break
	}
	require.Equal(t, 1, claimsWithRows, "one read took the whole backlog")
}

// A dispatcher that stops gracefully hands its shards over at once: one
// started just after it delivers everything without waiting out the
// stopped one's lease or membership.
func TestShardLeasesStopHandsOver(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 16)
	for _, agg := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		b.enqueueN(t, 40, agg)
	}
	slow := newRecorder(func(context.Context, *outbox.Message) error { time.Sleep(5 * time.Millisecond); return nil })
	cfg := shardConfig(outbox.Config{Lease: time.Minute, Workers: 4})
	first := *cfg
	first.Owner = "first"
	d1 := b.dispatcher(t, slow.Sink(), &first)
	require.NoError(t, d1.Start(context.Background()))
	slow.waitLen(t, 40, 10*time.Second)
	require.NoError(t, d1.Stop())

	second := *cfg
	second.Owner = "second"
	rec := newRecorder(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.dispatcher(t, rec.Sink(), &second).Drain(ctx))
	require.NoError(t, ctx.Err(), "the second dispatcher waited for the stopped one's lease")
	require.Equal(t, 320, b.countStatus(t, "done"))
}

// A running dispatcher takes a stopped one's shards within a poll
// interval, not at its next renewal a third of a (long) lease later.
func TestShardLeasesSurvivorTakesStoppedShards(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 8)
	owners := func() map[string]int { return b.shardOwners(t) }
	cfg := shardConfig(outbox.Config{Lease: time.Minute, PollInterval: 200 * time.Millisecond})
	a, c := *cfg, *cfg
	a.Owner, c.Owner = "A", "B"
	// B is a member from the start, so A takes only its half.
	b.exec(t, "INSERT INTO "+pgx.Identifier{b.schema, "outbox_shard_members"}.Sanitize()+" (owner, seen) VALUES ('B', now())")
	start(t, b.dispatcher(t, newRecorder(nil).Sink(), &a))
	eventually(t, func() bool { return owners()["A"] == 4 })
	d := b.dispatcher(t, newRecorder(nil).Sink(), &c)
	require.NoError(t, d.Start(context.Background()))
	eventually(t, func() bool { o := owners(); return o["A"] == 4 && o["B"] == 4 }, "B took the free half")
	require.NoError(t, d.Stop())
	eventually(t, func() bool { return owners()["A"] == 8 }, "A took B's shards at once")
}

// settleHook records every settled outcome.
type settleHook struct {
	outbox.BaseHook
	mu     sync.Mutex
	events []outbox.SettleEvent
}

func (h *settleHook) OnSettle(ev outbox.SettleEvent) {
	h.mu.Lock()
	h.events = append(h.events, ev)
	h.mu.Unlock()
}

// of returns the settle event of message id.
func (h *settleHook) of(id int64) (outbox.SettleEvent, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range h.events {
		if ev.Message != nil && ev.Message.ID == id {
			return ev, true
		}
	}
	return outbox.SettleEvent{}, false
}

// waiterProbe records, at the first claim after it is armed, whether the
// dispatcher's waiter row exists: the claim that follows a wake-up must
// have cleared it, or producers keep notifying a busy dispatcher.
type waiterProbe struct {
	*signals
	b      *testBundle
	owner  string
	armed  chan struct{}
	result chan int
}

func (p *waiterProbe) OnClaim(outbox.ClaimEvent) {
	select {
	case <-p.armed:
	default:
		return
	}
	var n int
	_ = p.b.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+
		pgx.Identifier{p.b.schema, "outbox_waiters"}.Sanitize()+" WHERE owner = $1", p.owner).Scan(&n)
	p.result <- n
}

func TestShardLeasesWakeClearsWaiter(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 2)
	p := &waiterProbe{signals: newSignals(), b: b, owner: "w", armed: make(chan struct{}, 1), result: make(chan int, 1)}
	d := b.dispatcher(t, newRecorder(nil).Sink(), shardConfig(outbox.Config{Owner: "w", PollInterval: 10 * time.Second, Hook: p}))
	start(t, d)
	waitIdle(t, p.signals)
	p.armed <- struct{}{}
	b.enqueueN(t, 1, "a")
	select {
	case n := <-p.result:
		require.Zero(t, n, "the claim after the wake-up left the waiter row registered")
	case <-time.After(5 * time.Second):
		require.FailNow(t, "no claim after the wake-up")
	}
}

// A sink slower than the lease: the shard renewal runs on its own schedule
// while every worker is busy, so the dispatcher keeps its shards and a
// second dispatcher, idle beside it, takes nothing over: every message is
// delivered once.
func TestShardLeasesSlowSinkKeepsItsShards(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 1)
	ids := b.enqueueN(t, 3, "a")
	lease := 300 * time.Millisecond
	slow := newRecorder(func(ctx context.Context, _ *outbox.Message) error {
		select {
		case <-time.After(2 * lease):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	cfg := outbox.Config{Lease: lease, PublishTimeout: 10 * lease, Workers: 1, BatchSize: 1}
	start(t, b.dispatcher(t, slow.Sink(), shardConfig(cfg)))
	slow.waitLen(t, 1, 10*time.Second, "the slow dispatcher started publishing")
	idle := newRecorder(nil)
	start(t, b.dispatcher(t, idle.Sink(), shardConfig(cfg)))

	require.Eventually(t, func() bool { return b.countStatus(t, "done") == len(ids) }, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, each(ids, 1), publishCounts(slow, idle), "each message delivered once")
	require.Zero(t, idle.Len(), "the shard stayed with the slow dispatcher")
	for _, id := range ids {
		require.Equal(t, 1, b.row(t, id).Attempts, "no delivery was lost to an expired lease")
	}
}

// Heartbeats are accepted under shard leases, and publishes may then
// outlive the lease (the shard renewal is the heartbeat).
func TestShardLeasesAcceptHeartbeats(t *testing.T) {
	t.Parallel()
	c := shardConfig(outbox.Config{Lease: time.Second, HeartbeatInterval: 200 * time.Millisecond, PublishTimeout: 5 * time.Second})
	require.NoError(t, c.WithDefaults().Validate())
	c = shardConfig(outbox.Config{Lease: time.Second, PublishTimeout: 5 * time.Second})
	require.NoError(t, c.WithDefaults().Validate(), "the renewal runs without a heartbeat interval too")
	require.False(t, (&outbox.Config{LeaseMode: outbox.LeaseShards}).WithDefaults().Ordered, "Ordered means the same under both lease modes")
	row := outbox.Config{Lease: time.Second, PublishTimeout: 5 * time.Second}
	require.Error(t, row.WithDefaults().Validate(), "row leases without heartbeats still bound the publish")
}

// A publish that hangs ignoring its context does not hold its aggregate
// until the dispatcher restarts: past PublishTimeout its shard is given
// up, taken again under a new token, and the message delivered again; the
// hung publish's late verdict is fenced off.
func TestShardLeasesHungPublishGivesItsShardUp(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 1)
	ids := b.enqueueN(t, 3, "a")
	release := make(chan struct{})
	var once sync.Once
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		hang := false
		once.Do(func() { hang = true })
		if hang {
			<-release // ignores its context
		}
		return nil
	})
	d := b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{Lease: 600 * time.Millisecond, PublishTimeout: 200 * time.Millisecond, Workers: 2}))
	start(t, d)
	t.Cleanup(func() { close(release) }) // before the dispatcher stops: cleanups run last first
	require.Eventually(t, func() bool { return b.countStatus(t, "done") == len(ids) }, 10*time.Second, 10*time.Millisecond,
		"the aggregate went on past its hung head")
	require.Equal(t, []int64{ids[0], ids[0], ids[1], ids[2]}, rec.IDs(), "the hung head again, then the rest in order")
	require.EqualValues(t, 1, d.Stats().HungPublishes)
}

// Messages being delivered under shard leases count as processing in
// status and the gauges, though no claim is written: each dispatcher
// reports what it has in flight with its shard renewal, the messages of an
// aggregate queued behind the one publishing included. The dispatcher is
// listed with the shards it holds.
func TestShardLeasesStatusShowsInFlight(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 4)
	ids := b.enqueueN(t, 3, "a")
	g := newGate()
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		g.wait(ctx, m.ID)
		return nil
	})
	cfg := shardConfig(outbox.Config{Lease: 600 * time.Millisecond, PublishTimeout: 5 * time.Second, Owner: "S"})
	start(t, b.dispatcher(t, sink, cfg))
	require.Equal(t, ids[0], g.next(t))
	t.Cleanup(g.Open) // before the dispatcher stops: cleanups run last first

	eventually(t, func() bool {
		st, err := b.admin.Status(t.Context())
		require.NoError(t, err)
		return st.Counts["processing"] == 3 && st.Counts["pending"] == 0
	}, "the message publishing and its successors queued behind it in the dispatcher count as processing")
	gs, err := b.admin.Gauges(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 3, gs.Processing)
	require.EqualValues(t, 0, gs.Pending)
	ds, err := b.admin.Dispatchers(t.Context())
	require.NoError(t, err)
	require.Len(t, ds, 1)
	require.Equal(t, "S", ds[0].Owner)
	require.EqualValues(t, 3, ds[0].InFlight)
	require.Equal(t, []int{0, 1, 2, 3}, ds[0].Shards)
	require.True(t, ds[0].LeaseUntil.After(time.Now().Add(-time.Minute)))
}

// A message whose transaction took its id before others but committed
// after they were delivered is delivered too: the read position of its
// shard is past its id. Further behind it than a read looks back (just
// behind, the next read finds it: TestCursorSweeps), a sweep from the
// front does, on the notification of its commit or, with no notification,
// within a poll interval while the dispatcher stays busy.
func TestShardLeasesDeliverALateCommit(t *testing.T) {
	t.Parallel()
	testDeliverALateCommit(t, func(t *testing.T) *testBundle { return shardBundle(t, 1) }, shardConfig)
}

// The same under row leases, whose claims start a little behind the rows
// claimed last in the ready queue (available_at, id): the late row's
// available_at, its transaction's start, is before every row delivered.
func TestRowLeasesDeliverALateCommit(t *testing.T) {
	t.Parallel()
	testDeliverALateCommit(t, func(t *testing.T) *testBundle { return setup(t) }, func(cfg outbox.Config) *outbox.Config { return &cfg })
}

func testDeliverALateCommit(t *testing.T, bundle func(*testing.T) *testBundle, config func(outbox.Config) *outbox.Config) {
	for _, tc := range []struct {
		name     string
		poll     time.Duration
		notified bool
		after    int // messages committed after it took its id
	}{
		{"notified", 10 * time.Second, true, 400},
		{"busy and not notified", 200 * time.Millisecond, false, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bundle(t)
			if !tc.notified {
				b.exec(t, "DROP TRIGGER "+pgx.Identifier{"outbox_wake"}.Sanitize()+" ON "+b.quoted)
			}
			rec := newRecorder(nil)
			sig := newSignals()
			d := b.dispatcher(t, rec.Sink(), config(outbox.Config{PollInterval: tc.poll, Hook: sig}))
			if tc.notified {
				start(t, d)
				waitIdle(t, sig)
			}
			slow, err := b.pool.Begin(t.Context())
			require.NoError(t, err)
			defer slow.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
			late, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), slow, msg("late", 0))
			require.NoError(t, err)
			if tc.notified {
				// As the wake-up trigger would, had the dispatcher been
				// registered as it ran: the notification goes out with the
				// commit.
				_, err = slow.Exec(t.Context(), "SELECT pg_notify($1, '')", b.schema+".outbox")
				require.NoError(t, err)
			}
			if !tc.notified {
				start(t, d)
			}
			tx, err := b.pool.Begin(t.Context())
			require.NoError(t, err)
			defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after Commit
			early, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), tx, msgs("early", tc.after)...)
			require.NoError(t, err)
			if tc.notified {
				_, err = tx.Exec(t.Context(), "SELECT pg_notify($1, '')", b.schema+".outbox")
				require.NoError(t, err)
			}
			require.NoError(t, tx.Commit(t.Context()))
			require.Greater(t, early[0], late[0])
			rec.waitLen(t, tc.after, 5*time.Second, "the rows committed first")
			if tc.notified {
				waitIdle(t, sig)
			} else {
				// Keep the dispatcher reading, so that no idle turn's
				// wake-up sweeps for it: the periodic sweep must.
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				go func() {
					for ctx.Err() == nil {
						_, _ = b.pool.Exec(ctx, "INSERT INTO "+b.quoted+" (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'busy', 'E', '{}')")
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			require.NoError(t, slow.Commit(t.Context()))
			require.Eventually(t, func() bool {
				for _, id := range rec.IDs() {
					if id == late[0] {
						return true
					}
				}
				return false
			}, 5*time.Second, 10*time.Millisecond, "the late commit was skipped")
		})
	}
}

// One aggregate's backlog goes out one message at a time in id order, each
// as soon as the one before it was acknowledged; a message that fails
// stops its aggregate until its retry succeeds: nothing after it is
// attempted meanwhile, and what was queued behind it goes out after it.
func TestShardLeasesChainStopsAtAFailure(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 2)
	ids := b.enqueueN(t, 60, "a")
	var mu sync.Mutex
	type attempt struct {
		id int64
		ok bool
	}
	var attempts []attempt
	tried := map[int64]bool{}
	publishing, most := 0, 0
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		publishing++
		most = max(most, publishing)
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		publishing--
		var err error
		switch {
		case m.ID == ids[10] && !tried[m.ID]:
			err = errors.New("receiver busy")
		case m.ID == ids[30] && !tried[m.ID]:
			err = outbox.Defer(100*time.Millisecond, "not yet") // refunds its attempt
		}
		tried[m.ID] = true
		attempts = append(attempts, attempt{m.ID, err == nil})
		return err
	})
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{Workers: 8, BatchSize: 16,
		RetryBase: 50 * time.Millisecond, RetryCap: 50 * time.Millisecond})))

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, most, "one message of the aggregate at a time")
	var delivered []int64
	var failed int64
	for _, a := range attempts {
		if failed != 0 {
			require.LessOrEqual(t, a.id, failed, "attempted after a failure before it, of the same aggregate, was delivered")
		}
		switch {
		case !a.ok:
			failed = a.id
		case a.id == failed:
			failed = 0
		}
		if a.ok {
			delivered = append(delivered, a.id)
		}
	}
	require.Equal(t, ids, delivered, "each message once, in id order")
	require.Equal(t, 60, b.countStatus(t, "done"))
}

// One aggregate's backlog, read while sweeps come often (every poll
// interval), is delivered once, in id order: a sweep never reads again
// what is in flight or what the same claim just read.
func TestShardLeasesDeliverOneAggregatesBacklogOnce(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 16)
	b.exec(t, "INSERT INTO "+b.quoted+" (aggregate_type, aggregate_id, event_type, payload) SELECT 'order', 'busy', 'E', '{}' FROM generate_series(1, 5000)")
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{PollInterval: 10 * time.Millisecond})))
	got := rec.IDs()
	again, behind := 0, 0
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			behind++
		}
	}
	seen := map[int64]bool{}
	for _, id := range got {
		if seen[id] {
			again++
		}
		seen[id] = true
	}
	require.Zero(t, again, "messages delivered more than once")
	require.Zero(t, behind, "messages delivered after a later one")
	require.Len(t, seen, 5000)
}

// A shard taken over from an owner that died is delivered one head at a
// time: an aggregate held back behind its dead message does not stop the
// shard's other aggregates.
func TestShardLeasesIsolatedShardSkipsABlockedAggregate(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 1)
	blocked := b.enqueueN(t, 3, "a")
	free := b.enqueueN(t, 3, "b")
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'dead', attempts = 3 WHERE id = $1", blocked[0])
	// An owner that died holding the shard: its successor isolates it.
	b.exec(t, "UPDATE "+pgx.Identifier{b.schema, "outbox_shards"}.Sanitize()+
		" SET owner = 'gone', token = token + 1, lease_until = now() - interval '1 second'")
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), shardConfig(outbox.Config{})))
	require.Equal(t, free, rec.IDs())
	require.Equal(t, 2, b.countStatus(t, "pending"), "held back behind the dead head")
}

// Unordered, a shard's messages go out concurrently, those of one
// aggregate too, and a message that fails holds nothing back: the rest of
// its aggregate is delivered while it waits for its retry.
func TestShardLeasesUnorderedDeliverAnAggregateConcurrently(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 2)
	ids := b.enqueueN(t, 60, "a")
	const together = 4
	var mu sync.Mutex
	publishing, most := 0, 0
	tried := map[int64]bool{}
	var retriedAfter int // messages delivered after ids[10] failed, before its retry
	failed := false
	met, once := make(chan struct{}), sync.Once{}
	giveUp, cancel := context.WithTimeout(t.Context(), 5*time.Second) // ordered, they never meet
	defer cancel()
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		publishing++
		most = max(most, publishing)
		if publishing == together {
			once.Do(func() { close(met) })
		}
		mu.Unlock()
		select { // the first publishes wait for each other
		case <-met:
		case <-giveUp.Done():
		}
		mu.Lock()
		defer mu.Unlock()
		publishing--
		switch {
		case m.ID == ids[10] && !tried[m.ID]:
			tried[m.ID], failed = true, true
			return errors.New("receiver busy")
		case m.ID == ids[10]:
			failed = false
		case failed:
			retriedAfter++
		}
		tried[m.ID] = true
		return nil
	})
	cfg := shardConfig(outbox.Config{Workers: 8, BatchSize: 16, RetryBase: 200 * time.Millisecond, RetryCap: 200 * time.Millisecond})
	cfg.Ordered = false
	drain(t, b.dispatcher(t, rec.Sink(), cfg))

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, most, together, "messages of one aggregate in flight at once")
	require.Positive(t, retriedAfter, "the aggregate went on while its failed message waited for its retry")
	got := rec.IDs()
	slices.Sort(got)
	require.Equal(t, ids, slices.Compact(got), "each message delivered")
	require.Equal(t, 60, b.countStatus(t, "done"))
}

// overlapHook holds the first finalize's completer in its hook until a
// second finalize was written, and records whether one was.
type overlapHook struct {
	outbox.BaseHook
	calls      sync.Mutex
	n          int
	second     chan struct{}
	overlapped chan bool
}

func (h *overlapHook) OnFinalize(ev outbox.FinalizeEvent) {
	if ev.Err != nil || ev.Retrying {
		return
	}
	h.calls.Lock()
	h.n++
	n := h.n
	h.calls.Unlock()
	switch n {
	case 1:
		select {
		case <-h.second:
			h.overlapped <- true
		case <-time.After(5 * time.Second):
			h.overlapped <- false
		}
	case 2:
		close(h.second)
	}
}

// Unordered shard leases write with two completers: a batch is finalized
// while the completer of the one before it is still settling it. Ordered,
// one completer keeps each aggregate's messages committed in the order
// they were delivered.
func TestShardLeasesUnorderedFinalizesOverlap(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 4)
	for i := range 20 {
		b.enqueueN(t, 5, fmt.Sprintf("agg-%d", i))
	}
	h := &overlapHook{second: make(chan struct{}), overlapped: make(chan bool, 1)}
	cfg := shardConfig(outbox.Config{BatchSize: 10, Hook: h})
	cfg.Ordered = false
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), cfg))
	require.Len(t, rec.IDs(), 100)
	require.True(t, <-h.overlapped, "a second finalize was written while the first completer was held")
	require.Equal(t, 100, b.countStatus(t, "done"))
}

// lookCounter counts the shard looks a pool sends.
type lookCounter struct{ n atomic.Int64 }

func (c *lookCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "-- Look: ") {
		c.n.Add(1)
	}
	return ctx
}

func (*lookCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// An idle dispatcher whose shares are as they should be looks at the
// others' less and less often, up to IdlePollMax; a message in flight
// brings the looks back to every poll interval.
func TestShardLeasesIdleLooksBackOff(t *testing.T) {
	t.Parallel()
	b := shardBundle(t, 4)
	looks := &lookCounter{}
	cfg, err := pgxpool.ParseConfig(testdb.DSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = looks
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	slow := make(chan struct{})
	rec := newRecorder(func(ctx context.Context, _ *outbox.Message) error {
		select {
		case <-slow:
		case <-ctx.Done():
		}
		return nil
	})
	c := shardConfig(outbox.Config{Table: b.table, Logger: quietLogger(), PollInterval: 50 * time.Millisecond,
		IdlePollMax: 2 * time.Second, Lease: 30 * time.Second})
	d, err := outbox.NewDispatcher(pool, rec.Sink(), c)
	require.NoError(t, err)
	start(t, d)

	// Backed off: in two seconds of idling, a look or two (40 at one a poll).
	time.Sleep(3 * time.Second) // the gap doubles from 50ms past 1.6s
	from := looks.n.Load()
	time.Sleep(2 * time.Second)
	require.LessOrEqual(t, looks.n.Load()-from, int64(3), "idle looks back off")

	// Busy: a message in flight (its publish held) brings them back.
	b.enqueueN(t, 1, "a")
	require.Eventually(t, func() bool { return d.Stats().Claimed == 1 }, 10*time.Second, 10*time.Millisecond)
	from = looks.n.Load()
	time.Sleep(time.Second)
	require.GreaterOrEqual(t, looks.n.Load()-from, int64(8), "a look every poll interval while busy")
	close(slow)
	rec.waitLen(t, 1, 10*time.Second)
}
