package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outbox"
)

// Overview is the overview's JSON (and the page's data): cheap gauges, the
// breakdowns of undelivered and dead messages, the dispatchers alive.
type Overview struct {
	Table        string `json:"table"`
	Pending      int64  `json:"pending"`
	Processing   int64  `json:"processing"`
	Dead         int64  `json:"dead"`
	DoneEstimate int64  `json:"done_estimate"`
	// DoneEstimated is true when DoneEstimate is the planner's estimate
	// (past 10,000 done rows); below that it is exact. DoneEstimatedAt is
	// when the planner's count was taken (the table's latest ANALYZE or
	// VACUUM); null unless estimated.
	DoneEstimated    bool       `json:"done_estimated"`
	DoneEstimatedAt  *time.Time `json:"done_estimated_at"`
	OldestAgeSeconds float64    `json:"oldest_undelivered_age_seconds"`
	ExpiredLeases    int64      `json:"expired_leases"`
	// BreakdownsAt is when the breakdowns were read: the sampler refreshes
	// them every BreakdownInterval.
	BreakdownsAt    time.Time        `json:"breakdowns_at"`
	ByEventType     []BreakdownView  `json:"by_event_type"`
	ByAggregateType []BreakdownView  `json:"by_aggregate_type"`
	Dispatchers     []DispatcherView `json:"dispatchers"`
	// Blocked is what waits behind dead heads, read with the breakdowns:
	// how many aggregates and messages, and the first 20 aggregates, the
	// oldest dead head first. Delivered in order, they wait until an
	// operator retries or skips the dead message.
	Blocked *outbox.Blocked `json:"blocked"`
	// Paused are the pauses in force (outbox.Admin.Pause), the whole
	// table's (route "") first.
	Paused []outbox.Pause `json:"paused"`
	// Destinations are the destinations the dispatchers limit or an
	// operator paused, with the backpressure the dispatchers reported
	// (outbox.Status.Destinations).
	Destinations []outbox.DestinationStatus `json:"destinations"`
}

// BreakdownView is one row of a breakdown: undelivered and dead counts of
// one event or aggregate type.
type BreakdownView struct {
	Key        string `json:"key"`
	Pending    int64  `json:"pending"`
	Processing int64  `json:"processing"`
	Dead       int64  `json:"dead"`
}

// DispatcherView is a lease owner: its in-flight count, its latest lease
// expiry (every claim and heartbeat moves it, so it is the freshest sign of
// life) and how many of its leases have run out.
type DispatcherView struct {
	Owner string `json:"owner"`
	// Live is whether it reports itself (within three of its beats); a
	// dispatcher that holds leases without reporting has stopped or cannot
	// reach the dispatchers table. Host, Version, LeaseMode, LastSeen and
	// Delivered1m are from its last report (empty when it is not live).
	Live        bool       `json:"live"`
	Host        string     `json:"host"`
	Version     string     `json:"version"`
	LeaseMode   string     `json:"lease_mode"`
	LastSeen    *time.Time `json:"last_seen"`
	Delivered1m int64      `json:"delivered_1m"`
	InFlight    int64      `json:"in_flight"`
	// LeaseUntil is its latest lease expiry; null when it holds none.
	LeaseUntil *time.Time `json:"lease_until"`
	Expired    int64      `json:"expired_leases"`
	// SinkPaused is whether its sink's breaker is open (as of its last
	// beat): the sink said it is unavailable, and only a probe is sent.
	SinkPaused bool `json:"sink_paused"`
	// Shards are the shards it holds under shard leases (absent under
	// row leases).
	Shards []int `json:"shards,omitempty"`
}

// ShardRanges is Shards as runs ("0-3, 8"), "" when it holds none.
func (v DispatcherView) ShardRanges() string {
	var b strings.Builder
	for i := 0; i < len(v.Shards); {
		j := i
		for j+1 < len(v.Shards) && v.Shards[j+1] == v.Shards[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		if j > i {
			fmt.Fprintf(&b, "%d-%d", v.Shards[i], v.Shards[j])
		} else {
			fmt.Fprintf(&b, "%d", v.Shards[i])
		}
		i = j + 1
	}
	return b.String()
}

// breakdownLimit is how many types each breakdown shows.
const breakdownLimit = 20

func (s *Server) overview(ctx context.Context, t *table) (Overview, outbox.Gauges, error) {
	g, err := t.admin.Gauges(ctx)
	if err != nil {
		return Overview{}, g, err
	}
	o := Overview{
		Table: t.name, Pending: g.Pending, Processing: g.Processing, Dead: g.Dead, DoneEstimate: g.Done, DoneEstimated: g.DoneEstimated,
		OldestAgeSeconds: g.OldestPendingAge.Seconds(), ExpiredLeases: g.ExpiredLeases,
	}
	// Until the sampler's first pass, the page reads them itself; after it,
	// the sampler keeps them fresh and no request pays for them.
	if err := t.breakdowns.fill(ctx, t); err != nil {
		return o, g, err
	}
	o.BreakdownsAt, o.ByEventType, o.ByAggregateType = t.breakdowns.get()
	o.Blocked = t.breakdowns.getBlocked()
	if g.DoneEstimated {
		if o.DoneEstimatedAt, err = t.admin.DoneEstimatedAt(ctx); err != nil {
			return o, g, err
		}
	}
	if o.Paused, err = t.admin.Pauses(ctx); err != nil {
		return o, g, err
	}
	var live []outbox.LiveDispatcher
	if o.Dispatchers, live, err = dispatchers(ctx, t); err != nil {
		return o, g, err
	}
	o.Destinations = outbox.DestinationsOf(live, o.Paused)
	return o, g, nil
}

func (s *Server) apiOverview(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	o, _, err := s.overview(r.Context(), t)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

type breakdownTable struct {
	Title, Key string
	Rows       []BreakdownView
}

func (s *Server) overviewPage(w http.ResponseWriter, r *http.Request, t *table, base pageData) {
	o, g, err := s.overview(r.Context(), t)
	if err != nil {
		s.pageDBError(w, r, base, err)
		return
	}
	base.Title, base.Page = "Overview", "overview"
	s.render(w, "overview", struct {
		pageData
		G               outbox.Gauges
		DoneEstimatedAt *time.Time
		BreakdownsAt    time.Time
		Breakdowns      []breakdownTable
		Dispatchers     []DispatcherView
		Blocked         *outbox.Blocked
		Paused          []outbox.Pause
		Destinations    []outbox.DestinationStatus
	}{base, g, o.DoneEstimatedAt, o.BreakdownsAt, []breakdownTable{
		{"event type", "event_type", o.ByEventType},
		{"aggregate type", "aggregate_type", o.ByAggregateType},
	}, o.Dispatchers, o.Blocked, o.Paused, o.Destinations})
}

// apiStatus answers exactly what `outboxd status --json` prints.
func (s *Server) apiStatus(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	st, err := t.admin.Status(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// TableView lists a served table. Health is the relay's word on it (see
// Config.Health): "" when it is healthy or the console cannot tell.
type TableView struct {
	Name   string `json:"name"`
	Health string `json:"health,omitempty"`
}

// tableViews lists the tables served, with their health.
func (s *Server) tableViews() []TableView {
	out := []TableView{}
	for _, t := range s.served() {
		out = append(out, TableView{Name: t.name, Health: s.health(t.name)})
	}
	return out
}

func (s *Server) apiTables(w http.ResponseWriter, _ *http.Request, _ principal) {
	out := struct {
		Tables []TableView `json:"tables"`
		Write  bool        `json:"write"`
	}{Tables: s.tableViews(), Write: s.cfg.Write}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) apiSamples(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		IntervalSeconds float64  `json:"interval_seconds"`
		Samples         []Sample `json:"samples"`
	}{s.cfg.SampleInterval.Seconds(), t.samples.all()})
}

func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	if s.timedOut(r, err) {
		s.logger.Warn("console: request timed out", "path", r.URL.Path, "timeout", s.cfg.RequestTimeout)
		apiError(w, http.StatusGatewayTimeout, "timeout", s.timeoutMessage())
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	s.logger.Error("console: request failed", "path", r.URL.Path, "error", err)
	apiError(w, http.StatusInternalServerError, "internal", cleanErr(err))
}

// pageDBError renders a page's failed read: 504 when it ran out of time.
func (s *Server) pageDBError(w http.ResponseWriter, r *http.Request, base pageData, err error) {
	if s.timedOut(r, err) {
		s.logger.Warn("console: request timed out", "path", r.URL.Path, "timeout", s.cfg.RequestTimeout)
		s.pageError(w, base, http.StatusGatewayTimeout, s.timeoutMessage())
		return
	}
	s.pageError(w, base, http.StatusInternalServerError, cleanErr(err))
}

// timedOut reports whether err is the request's deadline passing, or a
// statement the server cancelled (query_canceled, which statement_timeout
// and lock_timeout settings also raise).
func (s *Server) timedOut(r *http.Request, err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(r.Context().Err(), context.DeadlineExceeded) ||
		(errors.As(err, &pgErr) && (pgErr.Code == "57014" || pgErr.Code == "55P03"))
}

func (s *Server) timeoutMessage() string {
	return fmt.Sprintf("the database did not answer within %s (the console's request timeout); "+
		"narrow the filter, or try again when the table is less busy", s.cfg.RequestTimeout)
}

// cleanErr drops the library's "outbox: " prefixes.
func cleanErr(err error) string { return strings.ReplaceAll(err.Error(), "outbox: ", "") }
