package metrics_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/metrics"
)

// contract is the metric-name contract shared with the alert rules and the
// dashboard: every name, its type and its labels.
var contract = map[string]struct {
	typ    dto.MetricType
	labels []string
}{
	"outbox_messages":                     {dto.MetricType_GAUGE, []string{"status", "table"}},
	"outbox_oldest_pending_age_seconds":   {dto.MetricType_GAUGE, []string{"table"}},
	"outbox_expired_leases":               {dto.MetricType_GAUGE, []string{"table"}},
	"outbox_live_dispatchers":             {dto.MetricType_GAUGE, []string{"table"}},
	"outbox_db_refresh_errors_total":      {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_db_refresh_timestamp_seconds": {dto.MetricType_GAUGE, []string{"table"}},
	"outbox_publishes_total":              {dto.MetricType_COUNTER, []string{"outcome", "sink", "table"}},
	"outbox_publish_duration_seconds":     {dto.MetricType_HISTOGRAM, []string{"sink", "table"}},
	"outbox_delivery_lag_seconds":         {dto.MetricType_HISTOGRAM, []string{"sink", "table"}},
	"outbox_claim_batch_size":             {dto.MetricType_HISTOGRAM, []string{"table"}},
	"outbox_claim_duration_seconds":       {dto.MetricType_HISTOGRAM, []string{"table"}},
	"outbox_claim_errors_total":           {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_claims_failing":               {dto.MetricType_GAUGE, []string{"table"}},
	"outbox_claim_outages_total":          {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_finalize_duration_seconds":    {dto.MetricType_HISTOGRAM, []string{"table"}},
	"outbox_finalize_errors_total":        {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_fenced_finalizes_total":       {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_heartbeats_total":             {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_heartbeat_lost_leases_total":  {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_hung_publishes_total":         {dto.MetricType_COUNTER, []string{"table"}},
	"outbox_sink_paused":                  {dto.MetricType_GAUGE, []string{"table", "sink"}},
	"outbox_sink_pauses_total":            {dto.MetricType_COUNTER, []string{"table", "sink"}},
	"outbox_dispatcher_up":                {dto.MetricType_GAUGE, []string{"table"}},

	"outbox_destination_in_flight":            {dto.MetricType_GAUGE, []string{"destination", "table"}},
	"outbox_destination_waiting":              {dto.MetricType_GAUGE, []string{"destination", "table"}},
	"outbox_destination_handed_back_total":    {dto.MetricType_COUNTER, []string{"destination", "table"}},
	"outbox_destination_held_seconds_total":   {dto.MetricType_COUNTER, []string{"destination", "table"}},
	"outbox_destination_rate_limit":           {dto.MetricType_GAUGE, []string{"destination", "table"}},
	"outbox_destination_concurrency_limit":    {dto.MetricType_GAUGE, []string{"destination", "table"}},
	"outbox_destination_paused":               {dto.MetricType_GAUGE, []string{"destination", "table"}},
	"outbox_destination_paused_since_seconds": {dto.MetricType_GAUGE, []string{"destination", "table"}},
	"outbox_destination_unavailable":          {dto.MetricType_GAUGE, []string{"destination", "table"}},
}

// TestNames lints every registered metric against the contract: exactly its
// names (none extra, none missing), types and labels, help text on each,
// counters ending in _total, durations in _seconds, and the label values
// each series set starts with.
func TestNames(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(&metrics.Options{Registerer: reg, Table: "app.outbox", Sink: "http"})
	m.WatchDestinations(func() []outbox.DestinationState {
		return []outbox.DestinationState{
			{Destination: outbox.Destination{Name: "partner", Rate: 30, Concurrency: 4}, RateShare: 10, ConcurrencyShare: 2,
				InFlight: 2, Waiting: 5, HandedBack: 40, HeldFor: 12 * time.Second, Live: 3},
			{Destination: outbox.Destination{Name: "crm", Concurrency: 1}, ConcurrencyShare: 1, Live: 3, Unavailable: true},
		}
	})
	since := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	m.WatchPauses(func() []outbox.Pause {
		return []outbox.Pause{{Route: "", By: "alice", At: since}, {Route: "partner", By: "bob", At: since}}
	})
	fams := gather(t, reg)

	got := map[string]bool{}
	for _, f := range fams {
		name := f.GetName()
		got[name] = true
		want, ok := contract[name]
		require.True(t, ok, "%s is not in the contract", name)
		require.Equal(t, want.typ, f.GetType(), "type of %s", name)
		require.NotEmpty(t, strings.TrimSpace(f.GetHelp()), "help of %s", name)
		require.True(t, strings.HasPrefix(name, "outbox_"), name)
		if f.GetType() == dto.MetricType_COUNTER {
			require.True(t, strings.HasSuffix(name, "_total"), "counter %s must end in _total", name)
		} else {
			require.False(t, strings.HasSuffix(name, "_total"), "only counters end in _total: %s", name)
		}
		for _, word := range []string{"duration", "lag", "age", "timestamp"} {
			if slices.Contains(strings.Split(name, "_"), word) {
				require.True(t, strings.HasSuffix(name, "_seconds"), "%s is a time and must end in _seconds", name)
			}
		}
		require.NotEmpty(t, f.GetMetric(), "%s has no series", name)
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
				switch l.GetName() {
				case "table":
					require.Equal(t, "app.outbox", l.GetValue())
				case "sink":
					require.Equal(t, "http", l.GetValue())
				}
			}
			require.ElementsMatch(t, want.labels, labels, "labels of %s", name)
		}
	}
	for name := range contract {
		require.True(t, got[name], "contract metric %s is not registered", name)
	}

	series := flatten(t, fams, "app.outbox")
	require.Equal(t, map[string]float64{
		`outbox_publishes_total{outcome="done",sink="http"}`:       0,
		`outbox_publishes_total{outcome="retry",sink="http"}`:      0,
		`outbox_publishes_total{outcome="defer",sink="http"}`:      0,
		`outbox_publishes_total{outcome="dead",sink="http"}`:       0,
		`outbox_publishes_total{outcome="released",sink="http"}`:   0,
		`outbox_publishes_total{outcome="lease_lost",sink="http"}`: 0,
	}, family(series, "outbox_publishes_total"))
	require.Equal(t, map[string]float64{
		`outbox_messages{status="pending"}`:    0,
		`outbox_messages{status="processing"}`: 0,
		`outbox_messages{status="done"}`:       0,
		`outbox_messages{status="dead"}`:       0,
	}, family(series, "outbox_messages"))
	require.Equal(t, map[string]float64{`outbox_destination_waiting{destination="crm"}`: 0, `outbox_destination_waiting{destination="partner"}`: 5},
		family(series, "outbox_destination_waiting"))
	require.Equal(t, map[string]float64{`outbox_destination_held_seconds_total{destination="crm"}`: 0, `outbox_destination_held_seconds_total{destination="partner"}`: 12},
		family(series, "outbox_destination_held_seconds_total"))
	require.Equal(t, map[string]float64{`outbox_destination_unavailable{destination="crm"}`: 1, `outbox_destination_unavailable{destination="partner"}`: 0},
		family(series, "outbox_destination_unavailable"))
	require.Equal(t, map[string]float64{`outbox_destination_paused{destination="*"}`: 1, `outbox_destination_paused{destination="partner"}`: 1},
		family(series, "outbox_destination_paused"), "the whole table is *")
	require.Equal(t, float64(since.Unix()), family(series, "outbox_destination_paused_since_seconds")[`outbox_destination_paused_since_seconds{destination="partner"}`])
	require.Equal(t, map[string]float64{`outbox_destination_rate_limit{destination="partner"}`: 10},
		family(series, "outbox_destination_rate_limit"), "no rate series for a destination without a rate")
	require.Equal(t, map[string]float64{`outbox_destination_concurrency_limit{destination="crm"}`: 1, `outbox_destination_concurrency_limit{destination="partner"}`: 2},
		family(series, "outbox_destination_concurrency_limit"))
	var les []string
	for k := range family(series, "outbox_claim_batch_size_bucket") {
		les = append(les, k[strings.Index(k, `"`)+1:len(k)-2])
	}
	require.ElementsMatch(t, []string{"0", "1", "2", "5", "10", "20", "50", "100", "200", "500", "1000", "+Inf"}, les)

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestRegistration covers the registerer options: two tables share one
// registry, the same table twice is refused, and with no options the
// metrics live in a registry of their own that the handler serves.
func TestRegistration(t *testing.T) {
	t.Parallel()

	t.Run("TwoTablesShareARegistry", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		a := metrics.New(&metrics.Options{Registerer: reg, Table: "a"})
		metrics.New(&metrics.Options{Registerer: reg, Table: "b"})
		a.SetUp(true)
		up := map[string]float64{}
		for _, f := range gather(t, reg) {
			if f.GetName() != "outbox_dispatcher_up" {
				continue
			}
			for _, m := range f.GetMetric() {
				up[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		require.Equal(t, map[string]float64{"a": 1, "b": 0}, up)
	})

	t.Run("SameTableTwicePanics", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		metrics.New(&metrics.Options{Registerer: reg, Table: "a"})
		require.Panics(t, func() { metrics.New(&metrics.Options{Registerer: reg, Table: "a"}) })
	})

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		m := metrics.New(nil)
		srv := httptest.NewServer(m.Handler())
		defer srv.Close()
		got := flatten(t, scrape(t, srv.URL+"/metrics"), "outbox")
		require.Len(t, got, len(flatten(t, gatherFresh(t), "outbox")))
		require.Contains(t, got, `outbox_publishes_total{outcome="done",sink="default"}`)
	})
}

// gatherFresh gathers the series of metrics on a registry of their own.
func gatherFresh(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	metrics.New(&metrics.Options{Registerer: reg})
	return gather(t, reg)
}

// TestHookEvents feeds the hook events by hand, including the failures and
// lost leases a healthy dispatcher rarely produces, and checks where each
// lands, buckets included.
func TestHookEvents(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(&metrics.Options{Registerer: reg, Table: "outbox", Sink: "nats"})
	h := m.Hook()
	boom := errors.New("boom")

	h.OnClaim(outbox.ClaimEvent{Rows: 0, Duration: 300 * time.Microsecond})
	h.OnClaim(outbox.ClaimEvent{Rows: 7, Duration: 3 * time.Millisecond})
	h.OnClaim(outbox.ClaimEvent{Err: boom, Duration: 2 * time.Second})
	h.OnFinalize(outbox.FinalizeEvent{Rows: 5, LeaseLost: 2, Duration: 4 * time.Millisecond})
	h.OnFinalize(outbox.FinalizeEvent{Rows: 3, Err: boom, Duration: 20 * time.Second})
	msg := &outbox.Message{ID: 1}
	h.OnSettle(outbox.SettleEvent{Message: msg, Outcome: outbox.OutcomeDone, PublishDuration: 20 * time.Millisecond, Lag: 2 * time.Hour})
	h.OnSettle(outbox.SettleEvent{Message: msg, Outcome: outbox.OutcomeDone, PublishDuration: time.Millisecond, Lag: 40 * time.Millisecond})
	h.OnSettle(outbox.SettleEvent{Message: msg, Outcome: outbox.OutcomeRetry, PublishDuration: 70 * time.Second, Err: boom})
	h.OnSettle(outbox.SettleEvent{Message: msg, Outcome: outbox.OutcomeReleased})
	h.OnSettle(outbox.SettleEvent{Message: msg, Outcome: outbox.OutcomeLeaseLost})
	h.OnSettle(outbox.SettleEvent{Message: msg, Outcome: outbox.OutcomeLeaseLost, PublishDuration: 5 * time.Millisecond})
	h.OnHeartbeat(outbox.HeartbeatEvent{Rows: 4, LeaseLost: 1, Duration: time.Millisecond})
	h.OnHeartbeat(outbox.HeartbeatEvent{Rows: 2, LeaseLost: 2, Err: boom})

	got := flatten(t, gather(t, reg), "outbox")
	requireSeries(t, got, map[string]float64{
		`outbox_publishes_total{outcome="done",sink="nats"}`:       2,
		`outbox_publishes_total{outcome="retry",sink="nats"}`:      1,
		`outbox_publishes_total{outcome="defer",sink="nats"}`:      0,
		`outbox_publishes_total{outcome="dead",sink="nats"}`:       0,
		`outbox_publishes_total{outcome="released",sink="nats"}`:   1,
		`outbox_publishes_total{outcome="lease_lost",sink="nats"}`: 2,

		// Released and unpublished lease_lost messages have no duration.
		`outbox_publish_duration_seconds_count{sink="nats"}`:             4,
		`outbox_publish_duration_seconds_bucket{le="0.001",sink="nats"}`: 1,
		`outbox_publish_duration_seconds_bucket{le="0.005",sink="nats"}`: 2,
		`outbox_publish_duration_seconds_bucket{le="0.025",sink="nats"}`: 3,
		`outbox_publish_duration_seconds_bucket{le="60",sink="nats"}`:    3,
		`outbox_publish_duration_seconds_bucket{le="+Inf",sink="nats"}`:  4,

		// Only done messages have a delivery lag.
		`outbox_delivery_lag_seconds_count{sink="nats"}`:            2,
		`outbox_delivery_lag_seconds_bucket{le="0.01",sink="nats"}`: 0,
		`outbox_delivery_lag_seconds_bucket{le="0.05",sink="nats"}`: 1,
		`outbox_delivery_lag_seconds_bucket{le="3600",sink="nats"}`: 1,
		`outbox_delivery_lag_seconds_bucket{le="+Inf",sink="nats"}`: 2,
		`outbox_delivery_lag_seconds_sum{sink="nats"}`:              7200.04,
		`outbox_claim_duration_seconds_count`:                       3,
		`outbox_claim_duration_seconds_bucket{le="0.0005"}`:         1,
		`outbox_claim_duration_seconds_bucket{le="0.0025"}`:         1,
		`outbox_claim_duration_seconds_bucket{le="0.005"}`:          2,
		`outbox_claim_duration_seconds_bucket{le="2.5"}`:            3,
		`outbox_claim_errors_total`:                                 1,
		`outbox_claims_failing`:                                     1, // the last claim failed
		`outbox_claim_outages_total`:                                1,
		`outbox_claim_batch_size_count`:                             2, // a failed claim has no batch
		`outbox_claim_batch_size_sum`:                               7,
		`outbox_claim_batch_size_bucket{le="0"}`:                    1,
		`outbox_claim_batch_size_bucket{le="5"}`:                    1,
		`outbox_claim_batch_size_bucket{le="10"}`:                   2,
		`outbox_finalize_duration_seconds_count`:                    2,
		`outbox_finalize_duration_seconds_bucket{le="0.005"}`:       1,
		`outbox_finalize_duration_seconds_bucket{le="10"}`:          1,
		`outbox_finalize_duration_seconds_bucket{le="+Inf"}`:        2,
		`outbox_finalize_errors_total`:                              1,
		`outbox_fenced_finalizes_total`:                             2,
		`outbox_heartbeats_total`:                                   2,
		`outbox_heartbeat_lost_leases_total`:                        3,
		`outbox_dispatcher_up`:                                      0,
		`outbox_db_refresh_errors_total`:                            0,
		`outbox_db_refresh_timestamp_seconds`:                       0,
	})
}

// flakySink behaves by aggregate id: "ok" delivers; "flaky" fails
// retryably on its first attempt; "later" defers once; "bad" fails
// permanently; "stolen" finishes the row behind the dispatcher's back, as a
// worker that took over an expired lease would, so the fenced write is
// refused.
type flakySink struct {
	b        *testBundle
	mu       sync.Mutex
	deferred map[int64]bool
}

func (s *flakySink) Publish(ctx context.Context, msg *outbox.Message) error {
	switch msg.AggregateID {
	case "flaky":
		if msg.Attempt == 1 {
			return outbox.Retryable(errors.New("503"))
		}
	case "later":
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.deferred[msg.ID] {
			s.deferred[msg.ID] = true
			return outbox.Defer(10*time.Millisecond, "not yet")
		}
	case "bad":
		return outbox.Permanent(errors.New("422"))
	case "stolen":
		_, err := s.b.pool.Exec(ctx, "UPDATE "+s.b.quoted+" SET status = 'done', done_at = now(), lease_version = lease_version + 1 WHERE id = $1", msg.ID)
		return err
	}
	return nil
}

func (s *flakySink) Close() error { return nil }

// TestDispatcher drains messages of every kind through a real dispatcher
// whose hook is the metrics hook, then scrapes /metrics over HTTP.
func TestDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	var msgs []outbox.NewMessage
	for _, agg := range []string{"ok", "ok", "flaky", "later", "bad", "stolen"} {
		msgs = append(msgs, outbox.NewMessage{AggregateType: "order", AggregateID: agg, EventType: "E", Payload: map[string]int{}})
	}
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	ids, err := outbox.Producer{Table: b.table}.Enqueue(ctx, tx, msgs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	// One message has waited 90 seconds: its lag lands above the 60s bucket.
	b.exec(t, "UPDATE {{table}} SET created_at = now() - interval '90 seconds' WHERE id = $1", ids[0])

	d, err := outbox.NewDispatcher(b.pool, &flakySink{b: b, deferred: map[int64]bool{}}, &outbox.Config{
		Table: b.table, Hook: b.m.Hook(), Logger: quietLogger(),
		PollInterval: 20 * time.Millisecond, RetryBase: time.Millisecond, RetryCap: 5 * time.Millisecond,
	})
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, d.Drain(dctx))
	require.NoError(t, dctx.Err(), "Drain returned only because its context ended")

	srv := httptest.NewServer(b.m.Handler())
	defer srv.Close()
	got := flatten(t, scrape(t, srv.URL+"/metrics"), b.table)
	require.Equal(t, map[string]float64{
		`outbox_publishes_total{outcome="done",sink="test"}`:       4, // ok, ok, flaky, later
		`outbox_publishes_total{outcome="retry",sink="test"}`:      1,
		`outbox_publishes_total{outcome="defer",sink="test"}`:      1,
		`outbox_publishes_total{outcome="dead",sink="test"}`:       1,
		`outbox_publishes_total{outcome="released",sink="test"}`:   0,
		`outbox_publishes_total{outcome="lease_lost",sink="test"}`: 1,
	}, family(got, "outbox_publishes_total"))
	requireSeries(t, got, map[string]float64{
		// Every publish: six messages, two of them twice.
		`outbox_publish_duration_seconds_count{sink="test"}`:            8,
		`outbox_delivery_lag_seconds_count{sink="test"}`:                4,
		`outbox_delivery_lag_seconds_bucket{le="60",sink="test"}`:       3,
		`outbox_delivery_lag_seconds_bucket{le="120",sink="test"}`:      4,
		`outbox_claim_batch_size_sum`:                                   8, // rows leased
		`outbox_claim_errors_total`:                                     0,
		`outbox_claims_failing`:                                         0,
		`outbox_claim_outages_total`:                                    0,
		`outbox_finalize_errors_total`:                                  0,
		`outbox_fenced_finalizes_total`:                                 1,
		`outbox_heartbeats_total`:                                       0, // heartbeats are off
		`outbox_heartbeat_lost_leases_total`:                            0,
		`outbox_dispatcher_up`:                                          0,
		`outbox_db_refresh_errors_total`:                                0,
		`outbox_publish_duration_seconds_bucket{le="+Inf",sink="test"}`: 8,
	})
	// Every claim is timed; none failed, so each has a batch size.
	require.Equal(t, got["outbox_claim_batch_size_count"], got["outbox_claim_duration_seconds_count"])
	// At least the first claim and the one that took the retried and
	// deferred messages again, and a finalize after each.
	require.GreaterOrEqual(t, got["outbox_claim_duration_seconds_count"], 2.0)
	require.GreaterOrEqual(t, got["outbox_finalize_duration_seconds_count"], 2.0)
	require.Greater(t, got[`outbox_publish_duration_seconds_sum{sink="test"}`], 0.0)
	require.GreaterOrEqual(t, got[`outbox_delivery_lag_seconds_sum{sink="test"}`], 90.0)
	require.Less(t, got[`outbox_delivery_lag_seconds_sum{sink="test"}`], 90.0+3*20)
}

// beatHook passes events to the metrics hook and signals the first
// heartbeat.
type beatHook struct {
	outbox.Hook
	once sync.Once
	beat chan struct{}
}

func (h *beatHook) OnHeartbeat(ev outbox.HeartbeatEvent) {
	h.Hook.OnHeartbeat(ev)
	h.once.Do(func() { close(h.beat) })
}

// TestDispatcherHeartbeats holds a publish until a heartbeat has extended
// its lease, and checks the heartbeat counters.
func TestDispatcherHeartbeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.Producer{Table: b.table}.Enqueue(ctx, tx,
		outbox.NewMessage{AggregateType: "order", AggregateID: "slow", EventType: "E", Payload: map[string]int{}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	h := &beatHook{Hook: b.m.Hook(), beat: make(chan struct{})}
	sink := outbox.SinkFunc(func(ctx context.Context, _ *outbox.Message) error {
		select {
		case <-h.beat:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	d, err := outbox.NewDispatcher(b.pool, sink, &outbox.Config{
		Table: b.table, Hook: h, Logger: quietLogger(), PollInterval: 20 * time.Millisecond,
		Lease: 3 * time.Second, HeartbeatInterval: 20 * time.Millisecond,
	})
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, d.Drain(dctx))
	require.NoError(t, dctx.Err())

	got := flatten(t, gather(t, b.reg), b.table)
	require.GreaterOrEqual(t, got["outbox_heartbeats_total"], 1.0)
	requireSeries(t, got, map[string]float64{
		`outbox_heartbeat_lost_leases_total`:                 0,
		`outbox_publishes_total{outcome="done",sink="test"}`: 1,
	})
}

// TestRefresher checks the database gauges against rows in every state,
// then readiness: it needs both a recent refresh and a running dispatcher,
// and a refresh that keeps failing (the table dropped) takes it away.
func TestRefresher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `INSERT INTO {{table}} (aggregate_type, aggregate_id, event_type, payload, status, created_at, attempts, lease_owner, lease_until, done_at)
		VALUES
		('o', 'a', 'E', '{}', 'pending',    now() - interval '40 seconds', 0, NULL, NULL, NULL),
		('o', 'b', 'E', '{}', 'pending',    now(),                         2, NULL, NULL, NULL),
		('o', 'c', 'E', '{}', 'processing', now() - interval '90 seconds', 1, 'w', now() - interval '1 second', NULL),
		('o', 'd', 'E', '{}', 'processing', now(),                         1, 'w', now() + interval '1 minute', NULL),
		('o', 'e', 'E', '{}', 'dead',       now() - interval '1 hour',     12, NULL, NULL, NULL),
		('o', 'f', 'E', '{}', 'done',       now() - interval '2 hours',    1, NULL, NULL, now()),
		('o', 'g', 'E', '{}', 'done',       now() - interval '2 hours',    1, NULL, NULL, now()),
		('o', 'h', 'E', '{}', 'done',       now() - interval '2 hours',    1, NULL, NULL, now())`)
	b.exec(t, "ANALYZE {{table}}") // done is estimated from the planner's row count
	// Two dispatchers reported themselves: one within three beats, one
	// long ago.
	dispatchers := strings.TrimSuffix(b.quoted, `"`) + `_dispatchers"`
	b.exec(t, `INSERT INTO `+dispatchers+` (owner, host, version, lease_mode, last_seen, beat_us, in_flight, delivered_1m)
		VALUES ('live', 'h', 'v', 'row', now(), 10000000, 0, 0), ('gone', 'h', 'v', 'row', now() - interval '1 minute', 10000000, 0, 0)`)

	srv := httptest.NewServer(b.m.Handler())
	defer srv.Close()
	ready := func() (int, string) { return get(t, srv.URL+"/readyz") }

	code, body := get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	code, body = ready()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "dispatcher not running\n", body)
	b.m.SetUp(true)
	code, body = ready()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "database refresher not started\n", body)

	start := time.Now()
	// Readiness goes stale after three intervals; one second leaves room for
	// a refresh slowed by a loaded machine without making the test wait long.
	stop := b.m.StartRefresher(t.Context(), b.admin, time.Second)
	defer stop()
	var got map[string]float64
	require.Eventually(t, func() bool {
		got = flatten(t, scrape(t, srv.URL+"/metrics"), b.table)
		return got["outbox_db_refresh_timestamp_seconds"] > 0
	}, 10*time.Second, 10*time.Millisecond)
	// A scrape reads the gauges in no set order, so one that raced the
	// first refresh may have seen its timestamp but not its other gauges:
	// scrape again, now that a whole refresh has happened before.
	got = flatten(t, scrape(t, srv.URL+"/metrics"), b.table)
	require.InDelta(t, float64(start.UnixNano())/1e9, got["outbox_db_refresh_timestamp_seconds"], 10)
	require.GreaterOrEqual(t, got["outbox_oldest_pending_age_seconds"], 90.0)
	require.Less(t, got["outbox_oldest_pending_age_seconds"], 150.0)
	requireSeries(t, got, map[string]float64{
		`outbox_messages{status="pending"}`:    2,
		`outbox_messages{status="processing"}`: 2,
		`outbox_messages{status="done"}`:       3,
		`outbox_messages{status="dead"}`:       1,
		`outbox_expired_leases`:                1,
		`outbox_live_dispatchers`:              1,
		`outbox_db_refresh_errors_total`:       0,
		`outbox_dispatcher_up`:                 1,
	})
	code, body = ready()
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "ok\n", body)

	b.m.SetUp(false)
	code, body = ready()
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "dispatcher not running\n", body)
	require.Zero(t, flatten(t, gather(t, b.reg), b.table)["outbox_dispatcher_up"])
	b.m.SetUp(true)
	code, _ = ready()
	require.Equal(t, http.StatusOK, code)

	b.exec(t, "DROP TABLE {{table}}")
	require.Eventually(t, func() bool {
		code, body = ready()
		return code == http.StatusServiceUnavailable
	}, 30*time.Second, 10*time.Millisecond)
	require.Contains(t, body, "no successful database refresh for")
	require.Contains(t, body, "does not exist")
	require.Equal(t, 1, strings.Count(body, "\n"), "one-line reason: %q", body)
	got = flatten(t, gather(t, b.reg), b.table)
	require.GreaterOrEqual(t, got["outbox_db_refresh_errors_total"], 1.0)
	// The last values stay: the timestamp tells how stale they are.
	require.Equal(t, 2.0, got[`outbox_messages{status="pending"}`])

	stop()
	stop() // idempotent
}

// TestRefresherStopsWithContext checks the refresher ends with its context.
func TestRefresherStopsWithContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	stop := b.m.StartRefresher(ctx, b.admin, time.Hour)
	require.Eventually(t, func() bool {
		return flatten(t, gather(t, b.reg), b.table)["outbox_db_refresh_timestamp_seconds"] > 0
	}, 10*time.Second, 10*time.Millisecond)
	cancel()
	stop() // returns once the goroutine has ended (goleak checks the rest)
}

func TestServe(t *testing.T) {
	t.Parallel()

	t.Run("AddressInUse", func(t *testing.T) {
		t.Parallel()
		var lc net.ListenConfig
		ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		m := metrics.New(&metrics.Options{Logger: quietLogger()})
		err = m.Serve(t.Context(), ln.Addr().String())
		require.ErrorContains(t, err, "metrics: cannot listen on "+ln.Addr().String())
	})

	t.Run("BadAddress", func(t *testing.T) {
		t.Parallel()
		m := metrics.New(&metrics.Options{Logger: quietLogger()})
		require.ErrorContains(t, m.Serve(t.Context(), "not-an-address"), "metrics: cannot listen on not-an-address")
	})

	t.Run("ServesUntilCancelled", func(t *testing.T) {
		t.Parallel()
		// A free port: taken, then released for Serve.
		var lc net.ListenConfig
		ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())

		m := metrics.New(&metrics.Options{Logger: quietLogger()})
		ctx, cancel := context.WithCancel(t.Context())
		served := make(chan error, 1)
		go func() { served <- m.Serve(ctx, addr) }()
		require.Eventually(t, func() bool {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/healthz", nil)
			require.NoError(t, err)
			req.Close = true
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 10*time.Second, 10*time.Millisecond)
		code, body := get(t, "http://"+addr+"/metrics")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, body, `outbox_dispatcher_up{table="outbox"} 0`)
		cancel()
		select {
		case err := <-served:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Serve did not return after its context ended")
		}
	})
}

func TestSinkPauseIsAReadinessReason(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(&metrics.Options{Registerer: reg, Sink: "redis"})
	m.SetUp(true)
	h := m.Hook()
	h.OnSinkPause(outbox.SinkPauseEvent{Paused: true, Pause: time.Second, Err: errors.New("NOAUTH\nauthentication required")})
	ok, reason := m.Ready()
	require.False(t, ok)
	require.Equal(t, "sink paused: NOAUTH authentication required", reason)
	h.OnSinkPause(outbox.SinkPauseEvent{Paused: false})
	_, reason = m.Ready()
	require.NotContains(t, reason, "sink paused")
}

// A run of failed claims is one outage, however many retries it takes;
// the gauge says whether claims fail now.
func TestClaimOutages(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := metrics.New(&metrics.Options{Registerer: reg, Table: "outbox", Sink: "nats"})
	h := m.Hook()
	down := errors.New("connection refused")
	for range 5 {
		h.OnClaim(outbox.ClaimEvent{Err: down})
	}
	got := flatten(t, gather(t, reg), "outbox")
	requireSeries(t, got, map[string]float64{`outbox_claims_failing`: 1, `outbox_claim_outages_total`: 1, `outbox_claim_errors_total`: 5})
	h.OnClaim(outbox.ClaimEvent{Rows: 3})
	h.OnClaim(outbox.ClaimEvent{Err: down})
	h.OnClaim(outbox.ClaimEvent{Rows: 0})
	got = flatten(t, gather(t, reg), "outbox")
	requireSeries(t, got, map[string]float64{`outbox_claims_failing`: 0, `outbox_claim_outages_total`: 2, `outbox_claim_errors_total`: 6})
}
