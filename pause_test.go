package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/route"
)

// pauseSink records the order each aggregate's messages were published
// in and how many times each message was.
type pauseSink struct {
	mu     sync.Mutex
	order  map[string][]int64
	times  map[int64]int
	byType map[string]int
}

func newPauseSink() *pauseSink {
	return &pauseSink{order: map[string][]int64{}, times: map[int64]int{}, byType: map[string]int{}}
}

func (s *pauseSink) Publish(_ context.Context, m *outbox.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.order[m.AggregateID] = append(s.order[m.AggregateID], m.ID)
	s.times[m.ID]++
	s.byType[m.EventType]++
	return nil
}

func (s *pauseSink) Close() error { return nil }

func (s *pauseSink) count(eventType string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byType[eventType]
}

// requireOnceInOrder checks every message of ids published once and each
// aggregate's in id order.
func (s *pauseSink) requireOnceInOrder(t *testing.T, ids []int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, s.times[id], "message %d published once", id)
	}
	for agg, order := range s.order {
		for i := 1; i < len(order); i++ {
			require.Less(t, order[i-1], order[i], "aggregate %s in order: %v", agg, order)
		}
	}
}

// pausedMessages are n messages of each of aggs aggregates, of one event
// type, enqueued one aggregate after the other interleaved.
func pausedMessages(eventType string, aggs, n int) []outbox.NewMessage {
	var out []outbox.NewMessage
	for i := range n {
		for a := range aggs {
			out = append(out, outbox.NewMessage{AggregateType: "order", AggregateID: fmt.Sprintf("%s-%d", eventType, a),
				EventType: eventType, Payload: map[string]int{"n": i}})
		}
	}
	return out
}

// A paused route receives nothing while the other route goes on, through
// a restart of the dispatcher; its messages spend no attempt; resuming
// delivers its backlog, each message once and each aggregate in order.
// Both writes are audited. In every lease mode.
func TestPauseRoute(t *testing.T) {
	t.Parallel()
	for _, mode := range []outbox.LeaseMode{outbox.LeaseRows, outbox.LeaseShards, outbox.LeaseCursor} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			switch mode {
			case outbox.LeaseShards:
				b = shardBundle(t, 4)
			case outbox.LeaseCursor:
				b = cursorBundle(t, 4)
			}
			sink := newPauseSink()
			router, err := route.New([]route.Route{{Name: "partner", EventTypes: []string{"Slow"}, Sink: sink, Limits: outbox.Destination{Name: "partner"}}}, sink)
			require.NoError(t, err)
			p, made, err := b.admin.Pause(t.Context(), "alice", "partner", "partner maintenance")
			require.NoError(t, err)
			require.True(t, made)
			require.Equal(t, "alice", p.By)
			again, made, err := b.admin.Pause(t.Context(), "bob", "partner", "")
			require.NoError(t, err)
			require.False(t, made, "paused already")
			require.Equal(t, p, again, "the pause in force is kept")

			cfg := &outbox.Config{LeaseMode: mode, Ordered: true, Workers: 4, Flow: router}
			ids := b.enqueue(t, pausedMessages("Slow", 5, 4)...)
			fast := b.enqueue(t, pausedMessages("Fast", 10, 3)...)
			hook := newSignals()
			cfg.Hook = hook
			d := b.dispatcher(t, router, cfg)
			require.NoError(t, d.Start(context.Background()))
			waitUntil(t, func() bool { return sink.count("Fast") == len(fast) }, func() string {
				return fmt.Sprintf("the other route delivered %d of %d; %+v", sink.count("Fast"), len(fast), d.Stats())
			})
			eventually(t, func() bool { return d.Stats().Released >= 5 }, "each paused aggregate's head held back", func() string { return fmt.Sprintf("%+v %d", d.Stats(), sink.count("Slow")) }())
			require.Equal(t, []outbox.Pause{p}, d.Paused())
			require.NoError(t, d.Stop())
			require.Zero(t, sink.count("Slow"), "the paused route received nothing")

			// A restart does not lift it: new messages of the paused route
			// are held back by the next run, as the old ones stay.
			more := b.enqueue(t, pausedMessages("Slow2", 3, 1)...)
			ids = append(ids, more...)
			router2, err := route.New([]route.Route{{Name: "partner", EventTypes: []string{"Slow", "Slow2"}, Sink: sink, Limits: outbox.Destination{Name: "partner"}}}, sink)
			require.NoError(t, err)
			cfg.Flow = router2
			d2 := b.dispatcher(t, router2, cfg)
			start(t, d2)
			eventually(t, func() bool { return d2.Stats().Released >= 3 }, "the new messages held back after the restart")
			require.Zero(t, sink.count("Slow")+sink.count("Slow2"), "the paused route received nothing after the restart")
			if !b.cursors {
				require.Zero(t, b.maxAttempts(t, ids), "no attempt spent while paused")
			}

			lifted, woke, err := b.admin.Resume(t.Context(), "bob", "partner")
			require.NoError(t, err)
			require.Equal(t, p, lifted)
			require.Positive(t, woke)
			waitUntil(t, func() bool { return sink.count("Slow")+sink.count("Slow2") == len(ids) }, func() string {
				return fmt.Sprintf("the resumed route delivered %d of %d; %+v", sink.count("Slow")+sink.count("Slow2"), len(ids), d2.Stats())
			})
			sink.requireOnceInOrder(t, append(ids, fast...))
			if !b.cursors {
				require.Equal(t, 1, b.maxAttempts(t, ids), "one attempt each, none spent while paused")
			}
			_, _, err = b.admin.Resume(t.Context(), "bob", "partner")
			require.ErrorIs(t, err, outbox.ErrNotPaused)

			audit, err := b.admin.AuditList(t.Context(), 10)
			require.NoError(t, err)
			var seen []string
			for _, e := range audit {
				seen = append(seen, e.Action+" "+e.Name+" by "+e.Actor)
			}
			require.Subset(t, seen, []string{"pause partner by alice", "pause partner by bob", "resume partner by bob"})
		})
	}
}

// A paused table, paused while its dispatcher runs, delivers nothing and
// spends no attempt; a dispatcher that hears the pause claims nothing at
// all, one that does not (DisableNotify) obeys it from its next claim.
// The resume delivers the backlog.
func TestPauseTable(t *testing.T) {
	t.Parallel()
	for _, notify := range []bool{true, false} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rec := newRecorder(nil)
			d := b.dispatcher(t, rec.Sink(), &outbox.Config{DisableNotify: !notify})
			start(t, d)
			first := b.enqueueN(t, 5, "a")
			rec.waitLen(t, len(first), 10*time.Second)

			_, made, err := b.admin.Pause(t.Context(), "carol", "", "")
			require.NoError(t, err)
			require.True(t, made)
			if notify {
				eventually(t, func() bool { ps := d.Paused(); return len(ps) == 1 && ps[0].Whole() }, "the dispatcher heard the pause")
			}
			claims := d.Stats().Claims
			rest := b.enqueueN(t, 5, "b")
			eventually(t, func() bool { ps := d.Paused(); return len(ps) == 1 && ps[0].Whole() }, "the dispatcher read the pause")
			// Ten poll intervals: a dispatcher that sent would have.
			time.Sleep(500 * time.Millisecond)
			if notify {
				require.Equal(t, claims, d.Stats().Claims, "no claim while the table is paused")
			}
			require.Equal(t, len(first), rec.Len(), "nothing delivered while paused")
			eventually(t, func() bool { return b.tryCount("pending") == len(rest) }, "the backlog pending")
			require.Zero(t, b.maxAttempts(t, rest), "no attempt spent")

			_, _, err = b.admin.Resume(t.Context(), "carol", "")
			require.NoError(t, err)
			rec.waitLen(t, len(first)+len(rest), 10*time.Second)
		})
	}
}

// maxAttempts is the most attempts spent on any of ids.
func (b *testBundle) maxAttempts(t *testing.T, ids []int64) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT coalesce(max(attempts), 0) FROM "+b.quoted+" WHERE id = ANY($1)", ids).Scan(&n))
	return n
}
