package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
)

// cursorBundle is a bundle whose table has n shards and snapshot cursors.
func cursorBundle(t *testing.T, n int) *testBundle {
	t.Helper()
	b := shardBundle(t, n)
	require.NoError(t, b.admin.EnableCursors(t.Context()))
	b.cursors = true
	return b
}

func cursorConfig(cfg outbox.Config) *outbox.Config {
	cfg.LeaseMode = outbox.LeaseCursor
	return &cfg
}

// rewritten counts the outbox rows written since their insert: a row
// never updated still has the inserting transaction as its xmin.
func (b *testBundle) rewritten(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.quoted+
		" WHERE xmin::text::bigint <> (xid::text::bigint & 4294967295)").Scan(&n))
	return n
}

// parked lists the parked messages: id → status.
func (b *testBundle) parked(t *testing.T) map[int64]string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT id, status FROM "+pgx.Identifier{b.schema, "outbox_parked"}.Sanitize())
	require.NoError(t, err)
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var s string
		require.NoError(t, rows.Scan(&id, &s))
		out[id] = s
	}
	require.NoError(t, rows.Err())
	return out
}

// Each message is delivered once, each aggregate in id order, and no
// outbox row is written: the cursors move, the rows stay as inserted. Large
// claims read their rows in two statements at once; the order holds across
// the split.
func TestCursorLeasesDeliverOnceInOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		perAggregate int
		batch        int
	}{{"small claims", 10, 16}, {"split reads", 60, 600}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := cursorBundle(t, 4)
			want := map[string][]int64{}
			for round := range 3 {
				for _, agg := range []string{"a", "b", "c", "d", "e"} {
					want[agg] = append(want[agg], b.enqueueN(t, tc.perAggregate+round, agg)...)
				}
			}
			rec := newRecorder(nil)
			cfg := outbox.Config{Workers: 8, BatchSize: tc.batch, Ordered: true}
			drain(t, b.dispatcher(t, rec.Sink(), cursorConfig(cfg)))

			got := map[string][]int64{}
			for _, m := range rec.Messages() {
				got[m.AggregateID] = append(got[m.AggregateID], m.ID)
				require.Equal(t, 1, m.Attempt)
				require.Positive(t, m.FencingToken)
			}
			require.Equal(t, want, got, "each aggregate once, in id order")
			require.Zero(t, b.rewritten(t), "no outbox row was written")
			require.Empty(t, b.parked(t))

			// Delivered: a second drain finds nothing.
			again := newRecorder(nil)
			drain(t, b.dispatcher(t, again.Sink(), cursorConfig(cfg)))
			require.Empty(t, again.Messages())
		})
	}
}

// A retry and a dead message are parked, the only writes; the retry is
// delivered again with its attempt counted, the dead one stays parked, and
// unordered, nothing waits for either.
func TestCursorLeasesParkExceptions(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 2)
	ids := b.enqueueN(t, 20, "a")
	flaky, poison := ids[3], ids[7]
	st, err := b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 20, "processing": 0, "done": 0, "dead": 0}, st.Counts)
	require.NotNil(t, st.OldestPendingAgeSeconds)
	require.Equal(t, map[string]int64{"1": 20}, st.Attempts)
	var mu sync.Mutex
	attempts := map[int64][]int{}
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		attempts[m.ID] = append(attempts[m.ID], m.Attempt)
		mu.Unlock()
		switch {
		case m.ID == flaky && m.Attempt == 1:
			return errors.New("receiver busy")
		case m.ID == poison:
			return outbox.Permanent(errors.New("malformed"))
		}
		return nil
	})
	drain(t, b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{RetryBase: 20 * time.Millisecond, RetryCap: 20 * time.Millisecond})))

	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		switch id {
		case flaky:
			require.Equal(t, []int{1, 2}, attempts[id], "failed once, then delivered on its second attempt")
		default:
			require.Equal(t, []int{1}, attempts[id], "id %d", id)
		}
	}
	require.Equal(t, map[int64]string{poison: "dead"}, b.parked(t), "the retry left the parked table once delivered")
	require.Zero(t, b.rewritten(t))
	st, err = b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 19, "dead": 1}, st.Counts)
	require.Nil(t, st.OldestPendingAgeSeconds, "nothing undelivered")
	g, err := b.admin.Gauges(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(1), g.Dead)
	require.Zero(t, g.Pending)
}

// Ordered, a failure holds back the rest of its aggregate, parked behind
// it, until it is delivered; other aggregates go on meanwhile.
func TestCursorLeasesOrderedRetryHoldsBackItsAggregate(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 1)
	a := b.enqueueN(t, 6, "a")
	other := b.enqueueN(t, 3, "b")
	var mu sync.Mutex
	var order []int64
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, m.ID)
		if m.ID == a[2] && m.Attempt < 3 {
			return errors.New("receiver busy")
		}
		return nil
	})
	cfg := outbox.Config{Ordered: true, BatchSize: 4, Workers: 4, RetryBase: 30 * time.Millisecond, RetryCap: 30 * time.Millisecond}
	drain(t, b.dispatcher(t, rec.Sink(), cursorConfig(cfg)))

	mu.Lock()
	defer mu.Unlock()
	var gotA, gotOther []int64
	seen := map[int64]bool{}
	for _, id := range order {
		if seen[id] {
			continue
		}
		seen[id] = true
		if slices_contains(a, id) {
			gotA = append(gotA, id)
		} else {
			gotOther = append(gotOther, id)
		}
	}
	require.Equal(t, a, gotA, "a in id order, its tail only after its third message went out")
	require.Equal(t, other, gotOther)
	last := map[int64]int{}
	for i, id := range order {
		last[id] = i
	}
	for _, id := range a[3:] {
		require.Greater(t, last[id], last[a[2]], "%d went out after a[2]'s delivery", id)
	}
	require.Empty(t, b.parked(t), "everything was delivered")
}

func slices_contains(s []int64, v int64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A producer transaction that stays open while later ones are delivered,
// then commits, is delivered; one that rolls back is not.
func TestCursorLeasesDeliverALateCommit(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 2)
	late, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	defer late.Rollback(context.Background()) //nolint:errcheck // committed below
	lateIDs, err := outbox.Producer{Table: b.table}.Enqueue(t.Context(), late, msgs("late", 3)...)
	require.NoError(t, err)
	doomed, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = outbox.Producer{Table: b.table}.Enqueue(t.Context(), doomed, msgs("doomed", 2)...)
	require.NoError(t, err)

	rec := newRecorder(nil)
	d := b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{}))
	start(t, d)
	var early []int64
	for range 5 {
		early = append(early, b.enqueueN(t, 4, "early")...)
	}
	require.Eventually(t, func() bool { return len(rec.Messages()) == len(early) }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, doomed.Rollback(t.Context()))
	require.NoError(t, late.Commit(t.Context()))
	require.Eventually(t, func() bool { return len(rec.Messages()) == len(early)+len(lateIDs) }, 10*time.Second, 10*time.Millisecond)
	var got []int64
	for _, m := range rec.Messages() {
		got = append(got, m.ID)
	}
	require.ElementsMatch(t, append(early, lateIDs...), got, "each once, the late ones included, the rolled-back ones never")
}

// A dispatcher that stalls past its shard leases loses them: the one that
// takes over delivers the stalled batch again, and the stalled
// dispatcher's cursor move is fenced off, its verdicts reported lost.
func TestCursorLeasesTakeoverFencesTheStalledDispatcher(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 2)
	ids := b.enqueueN(t, 3, "a")
	g := newGate()
	stalledSink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		if m.ID == ids[1] {
			g.wait(ctx, m.ID)
		}
		return nil
	})
	sig := newSignals()
	stalled := b.dispatcher(t, stalledSink, cursorConfig(outbox.Config{Lease: 30 * time.Second, Hook: sig}))
	start(t, stalled)
	require.Equal(t, ids[1], g.next(t))

	b.expireShards(t)
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{Lease: 30 * time.Second})))
	require.ElementsMatch(t, ids, rec.IDs(), "the new owner delivered the whole batch")

	g.Open()
	sig.waitSettled(t, outbox.OutcomeLeaseLost, "the stalled cursor move was not fenced off")
	require.Zero(t, stalled.Stats().Done, "no verdict of the stalled batch counts as done")
	again := newRecorder(nil)
	drain(t, b.dispatcher(t, again.Sink(), cursorConfig(outbox.Config{Lease: 30 * time.Second})))
	require.Empty(t, again.IDs(), "the new owner's cursor stands")
}

// A dispatcher that stops hands its shards over at their cursors: the next
// delivers the rest, nothing twice.
func TestCursorLeasesStopHandsOver(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 8)
	for _, agg := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		b.enqueueN(t, 40, agg)
	}
	slow := newRecorder(func(context.Context, *outbox.Message) error { time.Sleep(2 * time.Millisecond); return nil })
	cfg := cursorConfig(outbox.Config{Lease: time.Minute, Workers: 4, BatchSize: 16, Ordered: true})
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
	all := append(slow.IDs(), rec.IDs()...)
	require.Len(t, all, 320, "each message once across the two")
	seen := map[int64]bool{}
	for _, id := range all {
		require.False(t, seen[id], "message %d delivered twice", id)
		seen[id] = true
	}
}

// A publish that hangs (a sink that ignores its context) gives its shard
// up: the shard's cursor is not moved past it, and whoever takes the shard
// next delivers it again.
func TestCursorLeasesHungPublishGivesItsShardUp(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 1)
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
	d := b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{Lease: 600 * time.Millisecond, PublishTimeout: 200 * time.Millisecond, Workers: 2}))
	start(t, d)
	t.Cleanup(func() { close(release) }) // before the dispatcher stops: cleanups run last first
	require.Eventually(t, func() bool {
		st, err := b.admin.Status(t.Context())
		return err == nil && st.Counts["pending"]+st.Counts["processing"] == 0 && st.Counts["done"] == 3
	}, 10*time.Second, 20*time.Millisecond, "the shard went on past its hung publish")
	got := rec.IDs()
	require.Subset(t, got, ids)
	require.EqualValues(t, 1, d.Stats().HungPublishes)
}

// A hung publish holds its batch, and the batches of its shard read after
// it wait behind that one: giving the shard up lets them go at once, so
// their slots come back and the other shards go on (they held every slot
// of the dispatcher, and no claim came to let them go).
func TestCursorLeasesHungPublishDoesNotStallTheRest(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 4)
	for i := range 8 {
		b.enqueueN(t, 5, fmt.Sprintf("a%d", i))
	}
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
	d := b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{
		Lease: 600 * time.Millisecond, PublishTimeout: 200 * time.Millisecond, Workers: 4, BatchSize: 10}))
	start(t, d)
	t.Cleanup(func() { close(release) }) // before the dispatcher stops: cleanups run last first
	require.Eventually(t, func() bool { return d.Stats().HungPublishes == 1 }, 10*time.Second, 10*time.Millisecond)
	for i := range 8 {
		b.enqueueN(t, 5, fmt.Sprintf("b%d", i))
	}
	require.Eventually(t, func() bool {
		st, err := b.admin.Status(t.Context())
		return err == nil && st.Counts["pending"]+st.Counts["processing"] == 0 && st.Counts["done"] == 80
	}, 15*time.Second, 20*time.Millisecond, "the dispatcher went on past its hung publish")
	// The hung message was parked as a failed attempt with its batch, and
	// the batches behind it written: it alone goes out again.
	twice := 0
	for _, n := range publishCounts(rec) {
		require.LessOrEqual(t, n, 2)
		if n == 2 {
			twice++
		}
	}
	require.Equal(t, 1, twice, "only the hung message is delivered again")
}

// Ordered, a dead message holds its aggregate back, parked behind it; the
// dead-letter commands see it, and once retried the aggregate goes on in
// order. Unordered, a dead message skipped is done.
func TestCursorLeasesDeadLetters(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 1)
	a := b.enqueueN(t, 5, "a")
	var mu sync.Mutex
	broken := true
	var order []int64
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.ID == a[1] && broken {
			return outbox.Permanent(errors.New("malformed"))
		}
		order = append(order, m.ID)
		return nil
	})
	cfg := cursorConfig(outbox.Config{Ordered: true, BatchSize: 2, Workers: 2})
	drain(t, b.dispatcher(t, rec.Sink(), cfg))
	mu.Lock()
	require.Equal(t, []int64{a[0]}, order, "the aggregate stops at its dead message")
	broken = false
	mu.Unlock()
	st, err := b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 3, "processing": 0, "done": 1, "dead": 1}, st.Counts)

	dead, err := b.admin.DeadList(t.Context(), 0, 10)
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, a[1], dead[0].ID)
	require.Equal(t, 1, dead[0].Attempts)
	require.Contains(t, dead[0].LastError, "malformed")
	retried, err := b.admin.DeadRetry(t.Context(), a[1])
	require.NoError(t, err)
	require.Equal(t, []int64{a[1]}, retried)
	drain(t, b.dispatcher(t, rec.Sink(), cfg))
	mu.Lock()
	require.Equal(t, a, order, "retried, the aggregate goes on in order")
	mu.Unlock()
	require.Empty(t, b.parked(t))

	poison := b.enqueueN(t, 1, "p")[0]
	broken = true
	bad := newRecorder(func(context.Context, *outbox.Message) error { return outbox.Permanent(errors.New("no")) })
	drain(t, b.dispatcher(t, bad.Sink(), cursorConfig(outbox.Config{})))
	skipped, err := b.admin.DeadSkip(t.Context(), poison)
	require.NoError(t, err)
	require.Equal(t, []int64{poison}, skipped)
	st, err = b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 6, "dead": 0}, st.Counts)
}

// A table with snapshot cursors is relayed by cursor dispatchers only: a
// shard or row-lease dispatcher would deliver every row again, and
// refuses to start; a cursor dispatcher refuses a table without them.
func TestCursorLeasesOnlyOnTheirTables(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 2)
	for _, mode := range []outbox.LeaseMode{outbox.LeaseRows, outbox.LeaseShards} {
		err := b.dispatcher(t, newRecorder(nil).Sink(), &outbox.Config{LeaseMode: mode}).Drain(t.Context())
		require.ErrorContains(t, err, "has snapshot cursors: run its dispatchers with the cursor lease mode", "mode %s", mode)
	}
	plain := shardBundle(t, 2)
	err := plain.dispatcher(t, newRecorder(nil).Sink(), cursorConfig(outbox.Config{})).Drain(t.Context())
	require.ErrorContains(t, err, "has no snapshot cursors: enable them first")
}

// Retention under snapshot cursors deletes what the cursors passed and
// nothing else: not a parked message, not a row past a cursor, not a row
// younger than the cut-off.
func TestCursorLeasesPurge(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 2)
	ids := b.enqueueN(t, 6, "a")
	poison := ids[2]
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		if m.ID == poison {
			return outbox.Permanent(errors.New("malformed"))
		}
		return nil
	})
	drain(t, b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{})))
	later := b.enqueueN(t, 3, "b") // past the cursors

	n, err := b.admin.Purge(t.Context(), time.Hour, &outbox.PurgeOpts{BatchSize: 2})
	require.NoError(t, err)
	require.Zero(t, n, "nothing is an hour old")
	n, err = b.admin.Purge(t.Context(), 0, &outbox.PurgeOpts{BatchSize: 2})
	require.NoError(t, err)
	require.EqualValues(t, 5, n, "the delivered rows")
	var left []int64
	rows, err := b.pool.Query(t.Context(), "SELECT id FROM "+b.quoted+" ORDER BY id")
	require.NoError(t, err)
	left, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, append([]int64{poison}, later...), left)

	rec2 := newRecorder(nil)
	drain(t, b.dispatcher(t, rec2.Sink(), cursorConfig(outbox.Config{})))
	require.ElementsMatch(t, later, rec2.IDs(), "the rows past the cursors were kept and delivered")
	st, err := b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 3, "dead": 1}, st.Counts)
}

// The console reads a cursor table's messages with their status derived
// from the cursors and the parked table (the status column stays as
// inserted): the list, its status filters and counts, a message page, the
// search and the breakdown.
func TestCursorLeasesConsoleReads(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 2)
	a := b.enqueueN(t, 6, "a")
	poison := a[2]
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		if m.ID == poison {
			return outbox.Permanent(errors.New("receiver refused it"))
		}
		return nil
	})
	drain(t, b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{})))
	later := b.enqueueN(t, 2, "c") // past the cursors

	statuses := func(f outbox.Filter) map[int64]string {
		t.Helper()
		got, _, err := b.admin.Messages(t.Context(), f, outbox.Page{Limit: 50})
		require.NoError(t, err)
		out := map[int64]string{}
		for _, m := range got {
			out[m.ID] = m.Status
		}
		return out
	}
	want := map[int64]string{}
	for _, id := range a {
		want[id] = "done"
	}
	want[poison] = "dead"
	for _, id := range later {
		want[id] = "pending"
	}
	require.Equal(t, want, statuses(outbox.Filter{}))
	require.Equal(t, map[int64]string{poison: "dead"}, statuses(outbox.Filter{Status: []string{"dead"}}))
	require.Equal(t, map[int64]string{later[0]: "pending", later[1]: "pending"}, statuses(outbox.Filter{Status: []string{"pending"}}))

	n, err := b.admin.Count(t.Context(), outbox.Filter{Status: []string{"done"}}, true)
	require.NoError(t, err)
	require.EqualValues(t, 5, n.N)

	m, err := b.admin.Message(t.Context(), poison)
	require.NoError(t, err)
	require.Equal(t, "dead", m.Status)
	require.Equal(t, 1, m.Attempts)
	require.NotNil(t, m.LastError)
	require.Contains(t, *m.LastError, "receiver refused it")

	found, err := b.admin.Search(t.Context(), outbox.Filter{ErrorContains: "REFUSED"}, outbox.Page{Limit: 10}, 100)
	require.NoError(t, err)
	require.Len(t, found.Messages, 1)
	require.Equal(t, poison, found.Messages[0].ID)

	rows, err := b.admin.BreakdownByAggregateType(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, []outbox.BreakdownRow{{Key: "order", Pending: 2, Dead: 1}}, rows)

}

// The bulk actions work on a cursor table as on the others, over the rows
// as the console reads them: a dead-letter retry over a filter parks the
// dead messages waiting again and they are delivered, a dead-letter skip
// gives them up (done, unblocking their aggregate), and a replay parks
// delivered messages to go out again with the replay's header; each is
// fenced on the status it starts from, audited, and moves nothing twice.
func TestCursorLeasesBulkActions(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 2)
	a := b.enqueueN(t, 4, "a")
	c := b.enqueueN(t, 2, "c")
	poison := map[int64]bool{a[1]: true, c[0]: true}
	var mu sync.Mutex
	healed := false
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if poison[m.ID] && !healed {
			return outbox.Permanent(errors.New("receiver refused it"))
		}
		return nil
	})
	cfg := cursorConfig(outbox.Config{Ordered: true})
	drain(t, b.dispatcher(t, rec.Sink(), cfg))
	require.Equal(t, map[string][]int64{"a": a[:2], "c": c[:1]}, byAggregate(rec.Messages()), "ordered: each aggregate waits behind its dead head")
	status := func(id int64) string {
		t.Helper()
		m, err := b.admin.Message(t.Context(), id)
		require.NoError(t, err)
		return m.Status
	}

	// Retry the dead of aggregate a: its head goes out, then the rest.
	n, err := b.admin.DeadRetryMatching(t.Context(), outbox.Filter{AggregateID: "a"}, outbox.BulkOpts{DryRun: true})
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the dry run counts")
	require.Equal(t, "dead", status(a[1]), "and moves nothing")
	mu.Lock()
	healed = true
	mu.Unlock()
	n, err = b.admin.DeadRetryMatching(t.Context(), outbox.Filter{AggregateID: "a"}, outbox.BulkOpts{Actor: "ops"})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, "pending", status(a[1]))
	require.Equal(t, "dead", status(c[0]), "outside the filter")
	n, err = b.admin.DeadRetryMatching(t.Context(), outbox.Filter{AggregateID: "a"}, outbox.BulkOpts{})
	require.NoError(t, err)
	require.Zero(t, n, "nothing dead is left to retry")
	rec2 := newRecorder(nil)
	drain(t, b.dispatcher(t, rec2.Sink(), cfg))
	require.Equal(t, a[1:], rec2.IDs(), "the retried head, then the messages behind it, in order")

	// Skip the dead of aggregate c: done undelivered, and c's next goes.
	n, err = b.admin.DeadSkipMatching(t.Context(), outbox.Filter{Status: []string{"dead"}}, outbox.BulkOpts{})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, "done", status(c[0]))
	rec3 := newRecorder(nil)
	drain(t, b.dispatcher(t, rec3.Sink(), cfg))
	require.Equal(t, c[1:], rec3.IDs(), "the skipped head is not delivered; the one behind it is")

	// Replay aggregate a: each goes out again, in order, marked.
	n, err = b.admin.Replay(t.Context(), outbox.Filter{AggregateID: "a"}, outbox.ReplayOpts{Name: "fix-1", BatchSize: 3})
	require.NoError(t, err)
	require.EqualValues(t, 4, n)
	for _, id := range a {
		require.Equal(t, "pending", status(id))
	}
	rec4 := newRecorder(nil)
	drain(t, b.dispatcher(t, rec4.Sink(), cfg))
	require.Equal(t, a, rec4.IDs())
	for _, m := range rec4.Messages() {
		require.Equal(t, "fix-1", m.Headers[outbox.ReplayHeader])
	}
	n, err = b.admin.Replay(t.Context(), outbox.Filter{Status: []string{"done"}, AggregateID: "zzz"}, outbox.ReplayOpts{Name: "none"})
	require.NoError(t, err)
	require.Zero(t, n)
	st, err := b.admin.Status(t.Context())
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"pending": 0, "processing": 0, "done": 6, "dead": 0}, st.Counts)
	require.Zero(t, b.rewritten(t)-len(a), "only the replayed rows were written (their header)")

	audit, err := b.admin.AuditList(t.Context(), 10)
	require.NoError(t, err)
	var actions []string
	for _, e := range audit {
		actions = append(actions, fmt.Sprintf("%s %d", e.Action, e.Count))
	}
	require.Subset(t, actions, []string{"dead_retry 1", "dead_skip 1", "replay 4"})
}

// A message that crashes every dispatcher delivering it goes dead, as
// under shard leases: the owner that takes a dead owner's shard delivers
// its next messages one at a time, each declared first, and each death
// with a declared message in flight is charged to that message; the
// healthy ones around it are delivered and never charged.
func TestCursorLeasesPoisonGoesDead(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 1)
	before := b.enqueueN(t, 3, "x")
	poison := b.enqueueN(t, 1, "p")[0]
	after := b.enqueueN(t, 3, "y")
	reached := make(chan struct{}, 10)
	hang := make(chan struct{})
	var mu sync.Mutex
	var attempts []int
	sink := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
		if m.ID != poison {
			return nil
		}
		mu.Lock()
		attempts = append(attempts, m.Attempt) // one publish at a time: each before its death
		mu.Unlock()
		reached <- struct{}{}
		select { // a dispatcher that never comes back from this publish
		case <-hang:
		case <-ctx.Done():
		}
		return errors.New("never returned")
	})
	settled := &settleHook{} // every dispatcher's: any of them may bury the poison
	cfg := cursorConfig(outbox.Config{Lease: 3 * time.Minute, PublishTimeout: time.Minute, MaxAttempts: 3, Hook: settled})
	for range cfg.MaxAttempts + 1 {
		start(t, b.dispatcher(t, sink, cfg))
		select {
		case <-reached:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "the poison message was not delivered")
		}
		b.expireShards(t) // that dispatcher is dead
	}
	t.Cleanup(func() { close(hang) })

	drain(t, b.dispatcher(t, sink, cfg))
	r := b.row(t, poison)
	require.Equal(t, "dead", r.Status)
	require.Equal(t, 3, r.Attempts)
	require.Contains(t, r.lastError(), "died 3 times")
	mu.Lock()
	require.Equal(t, []int{1, 1, 2, 3}, attempts, "each death while alone in flight counts as an attempt")
	mu.Unlock()
	ev, ok := settled.of(poison)
	require.True(t, ok, "the buried message reached OnSettle")
	require.Equal(t, outbox.OutcomeDead, ev.Outcome)
	require.Equal(t, "p", ev.Message.AggregateID)
	require.ErrorContains(t, ev.Err, "died 3 times")
	for _, id := range append(before, after...) {
		require.Equal(t, "done", b.row(t, id).Status)
	}
	var charged int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+b.quoted+" WHERE attempts > 0 AND id <> $1", poison).Scan(&charged))
	require.Zero(t, charged, "no healthy message was charged a crash")
	var strike *int64
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT strike_id FROM "+pgx.Identifier{b.schema, "outbox_shards"}.Sanitize()).Scan(&strike))
	require.Nil(t, strike, "the isolation ended once the shard had nothing left to deliver")
}

// Messages delivered before the table had shards are replayed under
// snapshot cursors: they have no shard of their own and are parked under
// their aggregate's.
func TestCursorLeasesReplayMessagesFromBeforeShards(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.enqueueN(t, 2, "a")
	b.exec(t, "UPDATE "+b.quoted+" SET status = 'done', done_at = now()")
	require.NoError(t, b.admin.EnableShards(t.Context(), 4))
	require.NoError(t, b.admin.EnableCursors(t.Context()))
	b.cursors = true
	n, err := b.admin.Replay(t.Context(), outbox.Filter{AggregateID: "a"}, outbox.ReplayOpts{Name: "old"})
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	rec := newRecorder(nil)
	drain(t, b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{Ordered: true})))
	require.Equal(t, a, rec.IDs(), "both, in order")
}

// A publish found hung while the dispatcher stops still lets go of the
// message queued behind it, so its batch is written: the messages of the
// shard delivered meanwhile are recorded done, not left for the next owner
// to deliver again. Orphans were handed over by the fetcher only, which had
// stopped.
func TestCursorLeasesHungPublishAtShutdown(t *testing.T) {
	t.Parallel()
	b := cursorBundle(t, 1)
	// One transaction: one read takes them all, into one batch.
	ids := b.enqueue(t, append(msgs("a", 2), msgs("b", 3)...)...)
	a := ids[:2] // a[0] hangs; a[1] waits behind it
	hanging, release := make(chan struct{}), make(chan struct{})
	rec := newRecorder(func(_ context.Context, m *outbox.Message) error {
		if m.ID == a[0] && m.Attempt == 1 {
			close(hanging)
			<-release // ignores its context
			return errors.New("hung")
		}
		return nil
	})
	d := b.dispatcher(t, rec.Sink(), cursorConfig(outbox.Config{
		Ordered: true, Lease: 3 * time.Second, PublishTimeout: time.Second, Workers: 4, BatchSize: 10}))
	require.NoError(t, d.Start(t.Context()))
	<-hanging
	// Stopped before the publish is found hung: the fetcher is gone by
	// then. Two of the others are delivered meanwhile (a claim takes as
	// many messages as there are workers).
	rec.waitLen(t, 3, 10*time.Second)
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop() }()
	require.Eventually(t, func() bool { return d.Stats().HungPublishes == 1 }, 10*time.Second, 10*time.Millisecond)
	close(release)
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		require.FailNow(t, "the dispatcher did not stop")
	}
	delivered := map[int64]bool{}
	for _, id := range rec.IDs() {
		delivered[id] = id != a[0]
	}
	n := 0
	for _, ok := range delivered {
		if ok {
			n++
		}
	}
	require.Positive(t, n)
	require.Equal(t, n, b.countStatus(t, "done"), "the messages delivered were recorded")
	require.NotContains(t, rec.IDs(), a[1], "the message behind the hung one was released unpublished")
}
