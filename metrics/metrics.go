// Package metrics exposes an outbox dispatcher and its table as Prometheus
// metrics, and serves them with health and readiness endpoints.
//
// Two sources feed it. The dispatcher's work (claims, finalizes, publishes
// and their outcomes, heartbeats) arrives through [Metrics.Hook], set as the
// dispatcher's Config.Hook. The table's health (rows by status, the age of
// the oldest undelivered message, expired leases) is polled from the
// database by [Metrics.StartRefresher] on an interval, never per scrape, so
// any number of scrapers cost the database nothing.
//
// Every metric carries a "table" label; those about publishing also carry
// "sink", and with Options.Pipeline every one carries "pipeline" (a daemon
// relaying several tables, served by a [Group]). The names are a contract
// shared with alert rules and dashboards:
//
//	outbox_messages{status}                       gauge: rows by status (done is an estimate)
//	outbox_oldest_pending_age_seconds             gauge: age of the oldest pending or processing row
//	outbox_expired_leases                         gauge: processing rows past their lease
//	outbox_live_dispatchers                       gauge: dispatchers of the table reporting themselves, idle or busy
//	outbox_db_refresh_errors_total                counter
//	outbox_db_refresh_timestamp_seconds           gauge: last successful refresh, unix seconds
//	outbox_publishes_total{sink,outcome}          counter
//	outbox_publish_duration_seconds{sink}         histogram
//	outbox_delivery_lag_seconds{sink}             histogram: created_at to done
//	outbox_claim_batch_size                       histogram: rows per claim
//	outbox_claim_duration_seconds                 histogram
//	outbox_claim_errors_total                     counter
//	outbox_finalize_duration_seconds              histogram
//	outbox_finalize_errors_total                  counter
//	outbox_fenced_finalizes_total                 counter: fenced writes refused
//	outbox_heartbeats_total                       counter
//	outbox_heartbeat_lost_leases_total            counter
//	outbox_hung_publishes_total                   counter: publishes past their timeout whose leases were let go
//	outbox_sink_paused{sink}                      gauge: 1 while the sink is paused (it reported itself unavailable)
//	outbox_sink_pauses_total{sink}                counter
//	outbox_dispatcher_up                          gauge: 1 while the dispatcher runs
//	outbox_destination_in_flight{destination}     gauge: publishes in flight to a limited destination
//	outbox_destination_waiting{destination}       gauge: messages handed back for want of its budget, not due yet
//	outbox_destination_handed_back_total{destination}  counter
//	outbox_destination_held_seconds_total{destination} counter: the delays they were given
//	outbox_destination_rate_limit{destination}    gauge: this dispatcher's share of its rate
//	outbox_destination_concurrency_limit{destination}  gauge: its share of its concurrency
package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/service"
)

// Defaults.
const (
	// RefreshIntervalDefault is how often the refresher polls the database
	// when StartRefresher is given no interval.
	RefreshIntervalDefault = 15 * time.Second
	// SinkDefault is the sink label when Options.Sink is empty.
	SinkDefault = "default"
	// staleAfter is how many refresh intervals may pass without a
	// successful refresh before the process is no longer ready: one or two
	// failed polls are tolerated, a database gone for longer is not.
	staleAfter = 3
	// minRefreshTimeout keeps a short interval from cutting off a refresh
	// that is merely slow (a busy database, a test under the race detector).
	minRefreshTimeout = 5 * time.Second
)

// Histogram buckets, in the metric's unit.
var (
	// publishBuckets: 1ms to 60s, the range of a sink round trip up to the
	// longest sensible publish timeout.
	publishBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	// lagBuckets: 10ms to 1h, from a dispatcher woken by NOTIFY to a
	// message that waited out retries.
	lagBuckets = []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}
	// statementBuckets: 0.5ms to 10s, one claim or finalize statement.
	statementBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// batchBuckets: rows per claim; 0 is an empty poll.
	batchBuckets = []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
)

// outcomes are every publish outcome, initialised to 0 so each series exists
// from the start (a rate over a series that appears late misses its first
// increment).
var outcomes = outbox.Outcomes()

// statuses are the values of outbox_messages' status label.
var statuses = []string{"pending", "processing", "done", "dead"}

// Options configure [New]. The zero value is usable.
type Options struct {
	// Gatherer is what the /metrics endpoint serves. Defaults to the
	// Registerer when it is also a Gatherer (a *prometheus.Registry), else
	// prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer

	// Logger receives refresh failures and the server's start. Defaults to
	// slog.Default().
	Logger *slog.Logger

	// Registerer is where the metrics are registered. Defaults to a new
	// registry of their own, holding nothing else.
	Registerer prometheus.Registerer

	// Sink is the sink label of the publish metrics: the sink URL's scheme
	// or a route name. Defaults to "default".
	Sink string

	// Table is the table label, the outbox table as configured ("name" or
	// "schema.name"). Defaults to "outbox".
	Table string

	// Pipeline, when set, is a pipeline label on every series: the
	// pipeline of a daemon relaying several tables (see [Group]). Metrics
	// with and without it cannot share a registerer.
	Pipeline string
}

// Metrics holds the collectors of one dispatcher and its table.
type Metrics struct {
	gatherer prometheus.Gatherer
	log      *slog.Logger

	tableCollectors
	dispatcherCollectors
	destinations *destinations
	pauses       *pauses

	// Readiness state.
	mu          sync.Mutex
	running     bool
	interval    time.Duration // zero until StartRefresher
	lastSuccess time.Time
	lastErr     error
	pausedBy    error // the sink's error while it is paused

	// failing is whether the last claim failed.
	failing atomic.Bool
}

// tableCollectors are the gauges the database refresh sets.
type tableCollectors struct {
	messages         *prometheus.GaugeVec
	oldestAge        prometheus.Gauge
	expiredLeases    prometheus.Gauge
	liveDispatchers  prometheus.Gauge
	refreshErrors    prometheus.Counter
	refreshTimestamp prometheus.Gauge
}

// dispatcherCollectors are what the dispatcher's hook feeds.
type dispatcherCollectors struct {
	publishes        *prometheus.CounterVec
	publishByOutcome map[outbox.Outcome]prometheus.Counter
	publishDuration  prometheus.Histogram
	deliveryLag      prometheus.Histogram
	claimBatch       prometheus.Histogram
	claimDuration    prometheus.Histogram
	claimErrors      prometheus.Counter
	claimsFailing    prometheus.Gauge
	claimOutages     prometheus.Counter
	finalizeDuration prometheus.Histogram
	finalizeErrors   prometheus.Counter
	fencedFinalizes  prometheus.Counter
	heartbeats       prometheus.Counter
	heartbeatLost    prometheus.Counter
	hungPublishes    prometheus.Counter
	sinkPaused       prometheus.Gauge
	sinkPauses       prometheus.Counter
	up               prometheus.Gauge
}

// New creates the metrics and registers them. opts may be nil. It panics if
// the registerer refuses them, which happens when metrics for the same table
// are already registered there: metrics for different tables may share a
// registerer.
func New(opts *Options) *Metrics {
	o := withDefaults(opts)
	m := &Metrics{
		gatherer: o.Gatherer,
		log:      o.Logger.With(slog.String("component", "metrics"), slog.String("table", o.Table)),
	}
	m.newCollectors(o.Table, o.Sink, o.Pipeline)
	m.publishByOutcome = make(map[outbox.Outcome]prometheus.Counter, len(outcomes))
	for _, oc := range outcomes {
		m.publishByOutcome[oc] = m.publishes.WithLabelValues(string(oc))
	}
	for _, s := range statuses {
		m.messages.WithLabelValues(s)
	}
	o.Registerer.MustRegister(m.collectors()...)
	return m
}

// collectors are every collector of m.
func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.messages, m.oldestAge, m.expiredLeases, m.liveDispatchers, m.refreshErrors, m.refreshTimestamp,
		m.publishes, m.publishDuration, m.deliveryLag,
		m.claimBatch, m.claimDuration, m.claimErrors, m.claimsFailing, m.claimOutages,
		m.finalizeDuration, m.finalizeErrors, m.fencedFinalizes,
		m.heartbeats, m.heartbeatLost, m.hungPublishes, m.sinkPaused, m.sinkPauses, m.up, m.destinations, m.pauses,
	}
}

// Unregister removes m's series from r (the registerer New was given): a
// pipeline that stops for good leaves no series behind.
func (m *Metrics) Unregister(r prometheus.Registerer) {
	for _, c := range m.collectors() {
		r.Unregister(c)
	}
}

// withDefaults is opts with every unset field at its default.
func withDefaults(opts *Options) Options {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = outbox.TableDefault
	}
	if o.Sink == "" {
		o.Sink = SinkDefault
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registerer == nil {
		reg := prometheus.NewRegistry()
		o.Registerer = reg
		if o.Gatherer == nil {
			o.Gatherer = reg
		}
	}
	if o.Gatherer == nil {
		if g, ok := o.Registerer.(prometheus.Gatherer); ok {
			o.Gatherer = g
		} else {
			o.Gatherer = prometheus.DefaultGatherer
		}
	}

	return o
}

// newCollectors creates the collectors, labelled with the table and, for
// what a publish measures, the sink.
func (m *Metrics) newCollectors(tableName, sinkName, pipeline string) {
	table := prometheus.Labels{"table": tableName}
	sink := prometheus.Labels{"table": tableName, "sink": sinkName}
	if pipeline != "" {
		table["pipeline"], sink["pipeline"] = pipeline, pipeline
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: table})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: table})
	}
	histogram := func(name, help string, labels prometheus.Labels, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: buckets})
	}
	m.tableCollectors = newTableCollectors(table, gauge, counter)
	m.destinations = newDestinations(table)
	m.pauses = newPauses(table)
	m.dispatcherCollectors = newDispatcherCollectors(table, sink, gauge, counter, histogram)
}

type (
	gaugeFunc     func(name, help string) prometheus.Gauge
	counterFunc   func(name, help string) prometheus.Counter
	histogramFunc func(name, help string, labels prometheus.Labels, buckets []float64) prometheus.Histogram
)

// newTableCollectors creates the gauges the database refresh sets.
func newTableCollectors(table prometheus.Labels, gauge gaugeFunc, counter counterFunc) tableCollectors {
	return tableCollectors{
		messages: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "outbox_messages",
			Help:        "Rows of the outbox table by status, as of the last database refresh. Pending, processing and dead are exact; done is estimated from the planner's statistics.",
			ConstLabels: table,
		}, []string{"status"}),
		oldestAge: gauge("outbox_oldest_pending_age_seconds",
			"Age of the oldest pending or processing message, as of the last database refresh; 0 when there is none."),
		expiredLeases: gauge("outbox_expired_leases",
			"Processing rows whose lease has run out (crashed or stalled workers), as of the last database refresh."),
		liveDispatchers: gauge("outbox_live_dispatchers",
			"Dispatchers of the table that reported themselves within three of their beats (a third of their lease, 1s to 10s), idle or busy, on any host, as of the last database refresh; 0: nothing relays the table."),
		refreshErrors: counter("outbox_db_refresh_errors_total",
			"Database refreshes of the table gauges that failed."),
		refreshTimestamp: gauge("outbox_db_refresh_timestamp_seconds",
			"Unix time of the last successful database refresh of the table gauges."),
	}
}

// newDispatcherCollectors creates what the dispatcher's hook feeds.
func newDispatcherCollectors(table, sink prometheus.Labels, gauge gaugeFunc, counter counterFunc, histogram histogramFunc) dispatcherCollectors {
	return dispatcherCollectors{
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "outbox_publishes_total",
			Help:        "Messages settled, by outcome: done, retry, defer, dead, released (returned unpublished) or lease_lost (the fenced write was refused).",
			ConstLabels: sink,
		}, []string{"outcome"}),
		publishDuration: histogram("outbox_publish_duration_seconds",
			"Time one publish to the sink took.", sink, publishBuckets),
		deliveryLag: histogram("outbox_delivery_lag_seconds",
			"Time from a message's created_at to its successful delivery, on the database's clock.", sink, lagBuckets),
		claimBatch: histogram("outbox_claim_batch_size",
			"Rows leased by one claim statement.", table, batchBuckets),
		claimDuration: histogram("outbox_claim_duration_seconds",
			"Time one claim statement took, failed ones included.", table, statementBuckets),
		claimErrors: counter("outbox_claim_errors_total",
			"Claim statements that failed."),
		claimsFailing: gauge("outbox_claims_failing",
			"1 while the last claim failed (the database unreachable, a failover, a privilege revoked): the dispatcher retries with backoff and delivers nothing meanwhile."),
		claimOutages: counter("outbox_claim_outages_total",
			"Runs of failed claims: each counts once, however many retries it took."),
		finalizeDuration: histogram("outbox_finalize_duration_seconds",
			"Time one batch finalize took, its retries included.", table, statementBuckets),
		finalizeErrors: counter("outbox_finalize_errors_total",
			"Batch finalizes that failed after their retries; their rows are re-claimed once their leases expire."),
		fencedFinalizes: counter("outbox_fenced_finalizes_total",
			"Fenced writes refused at finalize because the lease had been lost."),
		heartbeats: counter("outbox_heartbeats_total",
			"Lease-extending heartbeat statements run."),
		heartbeatLost: counter("outbox_heartbeat_lost_leases_total",
			"Leases a heartbeat found lost, whose publishes were cancelled."),
		hungPublishes: counter("outbox_hung_publishes_total",
			"Publishes found running past the publish timeout plus one heartbeat interval (a sink that ignores its context); their leases are no longer extended, so another dispatcher takes the rows over."),
		sinkPaused: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outbox_sink_paused", ConstLabels: sink,
			Help: "1 while the sink is paused because it reported itself unavailable (credentials, authorization, certificates): nothing is claimed and a probe retries it after a backoff."}),
		sinkPauses: prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_sink_pauses_total", ConstLabels: sink,
			Help: "Times the sink was paused because it reported itself unavailable."}),
		up: gauge("outbox_dispatcher_up",
			"1 while the dispatcher runs, else 0."),
	}
}

// Hook returns the [outbox.Hook] that feeds the dispatcher metrics; set it
// as the dispatcher's Config.Hook.
func (m *Metrics) Hook() outbox.Hook { return hook{m} }

type hook struct{ m *Metrics }

func (h hook) OnClaim(ev outbox.ClaimEvent) {
	h.m.claimDuration.Observe(ev.Duration.Seconds())
	if ev.Err != nil {
		h.m.claimErrors.Inc()
		if !h.m.failing.Swap(true) {
			h.m.claimOutages.Inc()
		}
		h.m.claimsFailing.Set(1)
		return
	}
	if h.m.failing.Swap(false) {
		h.m.claimsFailing.Set(0)
	}
	h.m.claimBatch.Observe(float64(ev.Rows))
}

func (h hook) OnFinalize(ev outbox.FinalizeEvent) {
	if ev.Retrying {
		// The series describe batches: the result follows, with its
		// whole duration, and an error only when the batch gave up.
		return
	}
	h.m.finalizeDuration.Observe(ev.Duration.Seconds())
	if ev.Err != nil {
		h.m.finalizeErrors.Inc()
		return
	}
	h.m.fencedFinalizes.Add(float64(ev.LeaseLost))
}

func (h hook) OnSettle(ev outbox.SettleEvent) {
	c, ok := h.m.publishByOutcome[ev.Outcome]
	if !ok {
		c = h.m.publishes.WithLabelValues(string(ev.Outcome))
	}
	c.Inc()
	// A released message was never published, and neither was a lease_lost
	// one whose release was fenced off: it has no publish duration.
	if ev.Outcome != outbox.OutcomeReleased && (ev.Outcome != outbox.OutcomeLeaseLost || ev.PublishDuration > 0) {
		h.m.publishDuration.Observe(ev.PublishDuration.Seconds())
	}
	if ev.Outcome == outbox.OutcomeDone {
		h.m.deliveryLag.Observe(max(ev.Lag, 0).Seconds())
	}
}

func (h hook) OnHeartbeat(ev outbox.HeartbeatEvent) {
	if ev.Rows > 0 || ev.Err != nil {
		h.m.heartbeats.Inc()
	}
	h.m.heartbeatLost.Add(float64(ev.LeaseLost))
	h.m.hungPublishes.Add(float64(ev.Hung))
}

func (hook) OnIdle(outbox.IdleEvent) {}

func (h hook) OnSinkPause(ev outbox.SinkPauseEvent) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	if !ev.Paused {
		h.m.pausedBy = nil
		h.m.sinkPaused.Set(0)
		return
	}
	h.m.pausedBy = ev.Err
	if h.m.pausedBy == nil {
		h.m.pausedBy = errors.New("unavailable")
	}
	h.m.sinkPaused.Set(1)
	h.m.sinkPauses.Inc()
}

// SetUp sets outbox_dispatcher_up, and with it readiness: true once the
// dispatcher runs, false once it has stopped.
func (m *Metrics) SetUp(up bool) {
	m.mu.Lock()
	m.running = up
	m.mu.Unlock()
	if up {
		m.up.Set(1)
	} else {
		m.up.Set(0)
	}
}

// StartRefresher polls admin's [outbox.Admin.Gauges] at once and then every
// interval (RefreshIntervalDefault when every is not positive), in the
// background, until ctx ends or stop is called; stop waits for the poll in
// progress and may be called more than once. admin must be on the table the
// metrics are labelled with. A failed poll keeps the gauges at their last
// values and counts in outbox_db_refresh_errors_total; each poll is bounded
// by the interval (at least 5s). Start one refresher per Metrics.
func (m *Metrics) StartRefresher(ctx context.Context, admin *outbox.Admin, every time.Duration) (stop func()) {
	if every <= 0 {
		every = RefreshIntervalDefault
	}
	m.mu.Lock()
	m.interval = every
	m.mu.Unlock()
	var r service.Runner
	// A fresh Runner always starts.
	_ = r.Start(ctx, func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m.refresh(ctx, admin, max(every, minRefreshTimeout))
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	return func() { _ = r.Stop() }
}

func (m *Metrics) refresh(ctx context.Context, admin *outbox.Admin, timeout time.Duration) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	g, err := admin.Gauges(rctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return // stopping: not a database failure
		}
		m.refreshErrors.Inc()
		m.mu.Lock()
		m.lastErr = err
		m.mu.Unlock()
		m.log.WarnContext(ctx, "refreshing table gauges failed", slog.Any("error", err))
		return
	}
	m.messages.WithLabelValues("pending").Set(float64(g.Pending))
	m.messages.WithLabelValues("processing").Set(float64(g.Processing))
	m.messages.WithLabelValues("done").Set(float64(g.Done))
	m.messages.WithLabelValues("dead").Set(float64(g.Dead))
	m.oldestAge.Set(g.OldestPendingAge.Seconds())
	m.expiredLeases.Set(float64(g.ExpiredLeases))
	m.liveDispatchers.Set(float64(g.LiveDispatchers))
	now := time.Now()
	m.refreshTimestamp.Set(float64(now.UnixNano()) / 1e9)
	m.mu.Lock()
	m.lastSuccess, m.lastErr = now, nil
	m.mu.Unlock()
}

// Ready reports whether the process is ready, and if not, why in one line:
// ready means the dispatcher runs (see [Metrics.SetUp]), its sink is not
// paused (it reported itself unavailable), and a database refresh
// succeeded within the last three refresh intervals.
func (m *Metrics) Ready() (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	failure := func(prefix string) string {
		if m.lastErr == nil {
			return prefix
		}
		return prefix + ": " + strings.Join(strings.Fields(m.lastErr.Error()), " ")
	}
	switch {
	case !m.running:
		return false, "dispatcher not running"
	case m.pausedBy != nil:
		return false, "sink paused: " + strings.Join(strings.Fields(m.pausedBy.Error()), " ")
	case m.interval == 0:
		return false, "database refresher not started"
	case m.lastSuccess.IsZero():
		return false, failure("no successful database refresh yet")
	case time.Since(m.lastSuccess) > staleAfter*m.interval:
		return false, failure(fmt.Sprintf("no successful database refresh for %s",
			time.Since(m.lastSuccess).Round(time.Millisecond)))
	}
	return true, "ok"
}

// Handler serves /metrics (the Prometheus text format), /healthz (200 "ok"
// while the process lives) and /readyz (200 "ok" when [Metrics.Ready], else
// 503 and the reason).
func (m *Metrics) Handler() http.Handler { return handler(m.gatherer, m.Ready) }

// handler serves the endpoints of Handler, gathered from g, ready as
// ready says.
func handler(g prometheus.Gatherer, ready func() (bool, string)) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, reason := ready()
		if !ok {
			writeText(w, http.StatusServiceUnavailable, reason)
			return
		}
		writeText(w, http.StatusOK, reason)
	})
	return mux
}

func writeText(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body + "\n"))
}

// shutdownTimeout bounds how long Serve waits for scrapes in progress.
const shutdownTimeout = 5 * time.Second

// Serve serves [Metrics.Handler] on addr (host:port, e.g. ":9090") until ctx
// ends, then shuts the server down gracefully (scrapes in progress get 5s)
// and returns nil. It returns an error at once if addr cannot be bound, and
// if the server fails while serving.
func (m *Metrics) Serve(ctx context.Context, addr string) error {
	return serve(ctx, addr, m.Handler(), m.log, nil)
}

// ServeTLS is Serve answering HTTPS only, with tc (its certificate, say,
// read again when renewed); probes and scrapes then use https.
func (m *Metrics) ServeTLS(ctx context.Context, addr string, tc *tls.Config) error {
	return serve(ctx, addr, m.Handler(), m.log, tc)
}

// serve serves h on addr as Serve does, over TLS when tc is set.
func serve(ctx context.Context, addr string, h http.Handler, log *slog.Logger, tc *tls.Config) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: cannot listen on %s: %w", addr, err)
	}
	// A scrape or a probe needs few connections: an eighth of the
	// open-file limit, at most 64.
	ln = service.LimitConns(ln, 8, 64)
	srv := service.HTTPServer(h, log)
	srv.TLSConfig = tc
	log.InfoContext(ctx, "metrics server listening", slog.String("addr", ln.Addr().String()), slog.Bool("tls", tc != nil))
	served := make(chan error, 1)
	go func() { served <- service.Serve(srv, ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("metrics: serving on %s: %w", addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Scrapes still running after the grace period are cut off: they
		// only read memory, nothing is lost.
		log.Warn("metrics server did not shut down gracefully; closing it", slog.Any("error", err))
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics: serving on %s: %w", addr, err)
	}
	return nil
}
