package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/route"
)

// flowSink records when each event type was published, how many times
// each message was, and the most publishes in flight at once; each
// publish takes hold.
type flowSink struct {
	hold time.Duration

	mu       sync.Mutex
	at       map[string][]time.Time
	times    map[int64]int
	inFlight int
	most     int
}

func newFlowSink(hold time.Duration) *flowSink {
	return &flowSink{hold: hold, at: map[string][]time.Time{}, times: map[int64]int{}}
}

func (s *flowSink) Publish(ctx context.Context, m *outbox.Message) error {
	s.mu.Lock()
	s.at[m.EventType] = append(s.at[m.EventType], time.Now())
	s.times[m.ID]++
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.mu.Unlock()
	if s.hold > 0 {
		time.Sleep(s.hold)
	}
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return nil
}

func (s *flowSink) Close() error { return nil }

func (s *flowSink) count(eventType string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.at[eventType])
}

// perSecond is the most publishes of eventType in one second of the
// clock, as a receiver counting per second sees them.
func (s *flowSink) perSecond(eventType string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	seconds := map[int64]int{}
	most := 0
	for _, at := range s.at[eventType] {
		k := at.Unix()
		seconds[k]++
		most = max(most, seconds[k])
	}
	return most
}

// requireOnceNoAttemptSpent checks that every message was published once
// and that waiting for a budget spent no attempt.
func (s *flowSink) requireOnceNoAttemptSpent(t *testing.T, b *testBundle, ids []int64) {
	t.Helper()
	s.mu.Lock()
	for _, id := range ids {
		require.Equal(t, 1, s.times[id], "message %d published once", id)
	}
	s.mu.Unlock()
	eventually(t, func() bool { return b.tryCount("done") == len(ids) }, "every message done")
	if b.cursors {
		return // the rows' columns are not written under cursors
	}
	var most int
	require.NoError(t, b.pool.QueryRow(t.Context(), fmt.Sprintf(`SELECT max(attempts) FROM %s`, b.quoted)).Scan(&most))
	require.Equal(t, 1, most, "no attempt spent waiting for a budget")
}

func typed(eventType string, n int) []outbox.NewMessage {
	out := make([]outbox.NewMessage, n)
	for i := range out {
		out[i] = outbox.NewMessage{AggregateType: "order", AggregateID: fmt.Sprintf("%s-%d", eventType, i), EventType: eventType, Payload: map[string]int{"n": i}}
	}
	return out
}

// One destination limited to 10 a second does not hold back the other:
// the unlimited route's messages, enqueued behind the limited route's
// backlog, are all delivered while most of the backlog still waits; the
// limited route never gets more than its rate and burst in a second; no
// message is published twice or spends an attempt waiting. In every
// lease mode.
func TestFlowSlowDestinationDoesNotHoldBackTheOthers(t *testing.T) {
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
			sink := newFlowSink(0)
			router, err := route.New([]route.Route{{
				Name: "partner", EventTypes: []string{"Slow"}, Sink: sink,
				Limits: outbox.Destination{Name: "partner", Rate: 10},
			}}, sink)
			require.NoError(t, err)
			const slow, fast = 40, 200
			ids := b.enqueue(t, typed("Slow", slow)...)
			ids = append(ids, b.enqueue(t, typed("Fast", fast)...)...)
			d := b.dispatcher(t, router, &outbox.Config{LeaseMode: mode, Workers: 10, Flow: router})
			start(t, d)
			waitUntil(t, func() bool { return sink.count("Fast") == fast }, func() string {
				return fmt.Sprintf("the unlimited route delivered: %d of %d, the limited %d; %+v", sink.count("Fast"), fast, sink.count("Slow"), d.Stats())
			})
			require.LessOrEqual(t, sink.count("Slow"), 30, "the limited route's backlog did not go first")
			waitUntil(t, func() bool { return sink.count("Slow") == slow }, func() string {
				return fmt.Sprintf("the limited route delivered: %d of %d; %+v", sink.count("Slow"), slow, d.Stats())
			})
			require.LessOrEqual(t, sink.perSecond("Slow"), 10+1, "the rate and its burst")
			sink.requireOnceNoAttemptSpent(t, b, ids)
			states := d.Destinations()
			require.Len(t, states, 1, "only the limited destination")
			s := states[0]
			require.Equal(t, outbox.Destination{Name: "partner", Rate: 10}, s.Destination)
			require.InDelta(t, 10, s.RateShare, 1e-9)
			require.Equal(t, 1, s.Live)
			require.Positive(t, s.HandedBack, "the backlog was handed back")
			require.Positive(t, s.HeldFor)
			require.Zero(t, s.InFlight)
		})
	}
}

// Three dispatchers share one destination's limits: together never more
// than 3 publishes in flight, nor more than 30 a second and the burst.
func TestFlowLimitsHoldOverDispatchers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := newFlowSink(20 * time.Millisecond)
	dest := outbox.OneDestination(outbox.Destination{Name: "partner", Rate: 30, Burst: 3, Concurrency: 3})
	var ds []*outbox.Dispatcher
	for i := range 3 {
		d := b.dispatcher(t, sink, &outbox.Config{Owner: fmt.Sprintf("relay-%d", i), Workers: 10, Flow: dest})
		start(t, d)
		ds = append(ds, d)
	}
	eventually(t, func() bool {
		live, err := b.admin.LiveDispatchers(t.Context())
		return err == nil && len(live) == 3
	}, "three dispatchers live")
	const n = 90
	ids := b.enqueue(t, typed("Paced", n)...)
	waitUntil(t, func() bool { return sink.count("Paced") == n }, func() string {
		return fmt.Sprintf("all delivered: %d of %d; %+v\n%+v\n%+v", sink.count("Paced"), n, ds[0].Stats(), ds[1].Stats(), ds[2].Stats())
	})
	sink.mu.Lock()
	most := sink.most
	sink.mu.Unlock()
	require.LessOrEqual(t, most, 3, "publishes in flight at once")
	require.LessOrEqual(t, sink.perSecond("Paced"), 30+3, "the rate and its burst over the three")
	sink.requireOnceNoAttemptSpent(t, b, ids)
}

// waitUntil waits 30s at most for cond (a bound, not a measure: the
// pace is the limits'), then fails with what describe says at that
// moment.
func waitUntil(t *testing.T, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A concurrency of 2 never sees a third publish in flight, whatever the
// workers, and the destination is kept busy up to it.
func TestFlowConcurrencyCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	sink := newFlowSink(10 * time.Millisecond)
	d := b.dispatcher(t, sink, &outbox.Config{Workers: 16, Flow: outbox.OneDestination(outbox.Destination{Name: "partner", Concurrency: 2})})
	const n = 150
	ids := b.enqueue(t, typed("Capped", n)...)
	start(t, d)
	waitUntil(t, func() bool { return sink.count("Capped") == n }, func() string {
		return fmt.Sprintf("all delivered: %d of %d; %+v", sink.count("Capped"), n, d.Stats())
	})
	sink.mu.Lock()
	most := sink.most
	sink.mu.Unlock()
	require.Equal(t, 2, most, "publishes in flight at once")
	sink.requireOnceNoAttemptSpent(t, b, ids)
}

// Status shows each destination's backpressure as the dispatchers report
// it with their beats (its limits, what waits for budget, what was handed
// back, its pause) and each dispatcher's breaker: a limited route with a
// backlog, a paused route without limits, then a sink that says it is
// unavailable.
func TestFlowStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var down atomic.Bool
	sink := outbox.SinkFunc(func(context.Context, *outbox.Message) error {
		if down.Load() {
			return outbox.Unavailable(errors.New("maintenance"))
		}
		return nil
	})
	router, err := route.New([]route.Route{
		{EventTypes: []string{"Slow"}, Sink: sink, Limits: outbox.Destination{Name: "partner", Rate: 2, Burst: 1}},
		{EventTypes: []string{"Crm"}, Sink: sink, Limits: outbox.Destination{Name: "crm"}},
	}, sink)
	require.NoError(t, err)
	_, _, err = b.admin.Pause(t.Context(), "alice", "crm", "")
	require.NoError(t, err)
	b.enqueue(t, typed("Slow", 20)...)
	// A lease of 3s: a beat every second.
	d := b.dispatcher(t, router, &outbox.Config{Workers: 4, Flow: router, Lease: 3 * time.Second})
	start(t, d)
	var st *outbox.Status
	eventually(t, func() bool {
		st, err = b.admin.Status(t.Context())
		require.NoError(t, err)
		return len(st.Destinations) == 2 && st.Destinations[1].HandedBack > 0
	}, "the dispatcher reported the backpressure")
	crm, partner := st.Destinations[0], st.Destinations[1]
	require.Equal(t, "crm", crm.Name)
	require.NotNil(t, crm.Paused)
	require.Equal(t, "alice", crm.Paused.By)
	require.Zero(t, crm.Dispatchers, "no dispatcher limits it")
	require.Equal(t, "partner", partner.Name)
	require.InDelta(t, 2, partner.Rate, 1e-9)
	require.Equal(t, 1, partner.Dispatchers)
	require.Positive(t, partner.HeldSeconds)
	require.Nil(t, partner.Paused)
	require.Len(t, st.Dispatchers, 1)
	require.False(t, st.Dispatchers[0].SinkPaused)
	require.Equal(t, "partner", st.Dispatchers[0].Destinations[0].Name)

	// With routes, a sink that says it is unavailable holds back its own
	// destination's messages: the dispatcher's breaker stays closed.
	down.Store(true)
	b.enqueue(t, typed("Other", 1)...)
	eventually(t, func() bool {
		st, err = b.admin.Status(t.Context())
		require.NoError(t, err)
		return len(st.Destinations) == 3 && st.Destinations[1].Name == "default" && st.Destinations[1].Unavailable
	}, "the unavailable destination reported")
	require.False(t, st.Dispatchers[0].SinkPaused)

	// With one destination, the dispatcher's breaker pauses its claims.
	one := setup(t)
	one.enqueue(t, typed("Other", 1)...)
	d1 := one.dispatcher(t, sink, &outbox.Config{Lease: 3 * time.Second})
	start(t, d1)
	eventually(t, func() bool {
		st, err = one.admin.Status(t.Context())
		require.NoError(t, err)
		return len(st.Dispatchers) == 1 && st.Dispatchers[0].SinkPaused
	}, "the open breaker reported")
}

// A route whose sink says it is unavailable holds back its own messages,
// with no attempt spent, while the other route's are all delivered; the
// dispatcher keeps claiming (its own breaker stays closed) and reports
// the destination unavailable; once the sink answers again, a probe gets
// through and the held messages follow, each once. In every lease mode.
func TestFlowDestinationUnavailable(t *testing.T) {
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
			var down atomic.Bool
			down.Store(true)
			ok := newFlowSink(0)
			partner := outbox.SinkFunc(func(ctx context.Context, m *outbox.Message) error {
				if down.Load() {
					return outbox.Unavailable(errors.New("partner: 503 maintenance"))
				}
				return ok.Publish(ctx, m)
			})
			router, err := route.New([]route.Route{{EventTypes: []string{"Partner"}, Sink: partner, Limits: outbox.Destination{Name: "partner"}}}, ok)
			require.NoError(t, err)
			held := b.enqueue(t, typed("Partner", 10)...)
			others := b.enqueue(t, typed("Other", 60)...)
			d := b.dispatcher(t, router, &outbox.Config{LeaseMode: mode, Workers: 4, Flow: router})
			start(t, d)
			waitUntil(t, func() bool { return ok.count("Other") == len(others) }, func() string {
				return fmt.Sprintf("the other route delivered %d of %d; %+v", ok.count("Other"), len(others), d.Stats())
			})
			states := d.Destinations()
			require.Len(t, states, 1)
			require.Equal(t, "partner", states[0].Name)
			require.True(t, states[0].Unavailable)
			require.Zero(t, ok.count("Partner"))
			if !b.cursors {
				require.Zero(t, b.maxAttempts(t, held), "no attempt spent on an unavailable destination")
			}

			down.Store(false)
			waitUntil(t, func() bool { return ok.count("Partner") == len(held) }, func() string {
				return fmt.Sprintf("the healed route delivered %d of %d; %+v", ok.count("Partner"), len(held), d.Stats())
			})
			ok.requireOnceNoAttemptSpent(t, b, append(held, others...))
			eventually(t, func() bool { return !d.Destinations()[0].Unavailable }, "the destination's breaker closed")
		})
	}
}
