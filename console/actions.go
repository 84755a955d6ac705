package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/outboxd/outbox"
)

// maxIDs is how many ids one retry or skip of a selection may name.
const maxIDs = 500

type deadRequest struct {
	IDs    []int64    `json:"ids"`
	Filter filterBody `json:"filter"`
	DryRun bool       `json:"dry_run"`
	writeScope
}

// writeScope is what a bulk write over a filter says besides the filter:
// All, that an empty filter means every message of the action's status;
// Bound, the bound of the preview it confirms (the write acts only within
// it); IncludeNewer, that rows coming to match while it runs count too.
type writeScope struct {
	All          bool       `json:"all"`
	Bound        *boundView `json:"bound"`
	IncludeNewer bool       `json:"include_newer"`
}

// boundView is an outbox.Bound as the API carries it: a preview answers it
// and the write it confirms sends it back. Limit is null when the
// preview's count was not exact.
type boundView struct {
	MaxID int64     `json:"max_id"`
	Limit *int64    `json:"limit"`
	At    time.Time `json:"at,omitzero"`
}

func (b *boundView) bound() *outbox.Bound {
	if b == nil {
		return nil
	}
	out := &outbox.Bound{MaxID: b.MaxID, Limit: outbox.NoLimit}
	if b.Limit != nil {
		out.Limit = *b.Limit
	}
	return out
}

// check refuses a write scope that does not fit its filter: an empty
// filter without "all" (a typo must not widen a write to everything),
// "all" beside filter terms, a negative bound. A dry run may count all.
func (ws writeScope) check(f outbox.Filter, dryRun bool) error {
	switch {
	case ws.All && !f.Empty():
		return &outbox.FilterError{Term: "all", Err: errors.New(`give "all": true or filter terms, not both`)}
	case !ws.All && f.Empty() && !dryRun:
		return &outbox.FilterError{Term: "all", Err: errors.New(`the filter matches every message of the action; send "all": true to act on all of them`)}
	case ws.Bound != nil && (ws.Bound.MaxID < 0 || ws.Bound.Limit != nil && *ws.Bound.Limit < 0):
		return errorf("bound: max_id and limit must not be negative")
	case ws.Bound != nil && ws.IncludeNewer:
		return errorf(`give a "bound" or "include_newer", not both`)
	}
	return nil
}

// apiDeadAction retries or skips dead messages: the ids given (at once), or
// all matching a filter (a dry run answers the count; otherwise a tracked
// job starts and the answer is 202 with the job).
func (s *Server) apiDeadAction(action string) apiHandler {
	return func(w http.ResponseWriter, r *http.Request, p principal) {
		t := s.tableOf(w, r)
		if t == nil {
			return
		}
		var req deadRequest
		if !decodeBody(w, r, &req) {
			return
		}
		if req.All && req.Filter == nil {
			req.Filter = filterBody{}
		}
		switch {
		case len(req.IDs) > 0 && req.Filter != nil:
			apiError(w, http.StatusBadRequest, "bad_request", `give "ids" or a "filter" (or "all"), not both`)
		case len(req.IDs) > maxIDs:
			apiError(w, http.StatusBadRequest, "bad_request", "at most 500 ids at once; use a filter for more")
		case len(req.IDs) > 0:
			s.deadIDs(w, r, p, t, action, req)
		case req.Filter != nil:
			s.deadMatching(w, r, p, t, action, req)
		default:
			apiError(w, http.StatusBadRequest, "bad_request", `give "ids", a "filter", or "all": true for every dead message`)
		}
	}
}

func (s *Server) bulkFunc(t *table, action string) func(context.Context, outbox.Filter, outbox.BulkOpts) (int64, error) {
	if action == "retry" {
		return t.admin.DeadRetryMatching
	}
	return t.admin.DeadSkipMatching
}

// deadIDs retries or skips a selection at once: one fenced, audited bulk
// action over those ids that are still dead.
func (s *Server) deadIDs(w http.ResponseWriter, r *http.Request, p principal, t *table, action string, req deadRequest) {
	if req.DryRun {
		apiError(w, http.StatusBadRequest, "bad_request", "dry_run goes with a filter; the ids are the preview")
		return
	}
	f := outbox.Filter{Status: []string{"dead"}, IDs: req.IDs}
	n, err := s.bulkFunc(t, action)(r.Context(), f, outbox.BulkOpts{Actor: p.actor})
	if err != nil {
		s.answerErr(w, r, asRequestError(err))
		return
	}
	writeCount(w, n)
}

func (s *Server) deadMatching(w http.ResponseWriter, r *http.Request, p principal, t *table, action string, req deadRequest) {
	f, err := bodyFilter(req.Filter, "dead")
	if err == nil {
		err = req.check(f, req.DryRun)
	}
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	run := s.bulkFunc(t, action)
	if req.DryRun {
		s.preview(w, r, t, "dead_"+action, f, outbox.PreviewOpts{Actor: p.actor})
		return
	}
	view := JobView{Kind: "dead_" + action, Table: t.name, Actor: p.actor, Filter: f.Terms()}
	s.startJob(w, r, t, f, view, func(ctx context.Context, j *job) (int64, error) {
		return run(ctx, f, outbox.BulkOpts{Actor: p.actor, Progress: j.progress, Total: j.setTotal,
			Bound: req.Bound.bound(), IncludeNewer: req.IncludeNewer})
	})
}

type replayRequest struct {
	Name   string     `json:"name"`
	Rate   float64    `json:"rate"`
	Filter filterBody `json:"filter"`
	DryRun bool       `json:"dry_run"`
	writeScope
}

// apiReplay re-delivers done messages matching a filter, as a tracked job
// (or answers the count on a dry run).
func (s *Server) apiReplay(w http.ResponseWriter, r *http.Request, p principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	var req replayRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Name == "" || req.Rate < 0 {
		apiError(w, http.StatusBadRequest, "bad_request", `"name" is required and "rate" must not be negative`)
		return
	}
	if req.Filter == nil {
		req.Filter = filterBody{}
	}
	f, err := bodyFilter(req.Filter, "done")
	if err == nil {
		err = req.check(f, req.DryRun)
	}
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	opts := outbox.ReplayOpts{Name: req.Name, Rate: req.Rate, Actor: p.actor, Bound: req.Bound.bound(), IncludeNewer: req.IncludeNewer}
	if err := opts.Validate(); err != nil {
		// Refused here, not as a job that fails at once.
		apiError(w, http.StatusBadRequest, "bad_request", cleanErr(err))
		return
	}
	if req.DryRun {
		s.preview(w, r, t, "replay", f, outbox.PreviewOpts{Actor: p.actor, Name: req.Name})
		return
	}
	view := JobView{Kind: "replay", Table: t.name, Name: req.Name, Rate: req.Rate, Actor: p.actor, Filter: f.Terms()}
	s.startJob(w, r, t, f, view, func(ctx context.Context, j *job) (int64, error) {
		opts.Progress, opts.Total = j.progress, j.setTotal
		return t.admin.Replay(ctx, f, opts)
	})
}

// preview answers a dry run: the bounded count of the rows the action
// would move (capped, or partial: among the newest rows of a window), so
// that it stays fast at any table size. The job's total is exact.
func (s *Server) preview(w http.ResponseWriter, r *http.Request, t *table, action string, f outbox.Filter, o outbox.PreviewOpts) {
	o.Window = s.cfg.SearchWindow
	c, err := t.admin.PreviewMatching(r.Context(), action, f, o)
	if err != nil {
		s.answerErr(w, r, asRequestError(err))
		return
	}
	b := &boundView{MaxID: c.Bound.MaxID, At: c.At}
	if c.Bound.Limit >= 0 {
		b.Limit = &c.Bound.Limit
	}
	writeJSON(w, http.StatusOK, struct {
		Count    int64      `json:"count"`
		Capped   bool       `json:"capped"`
		Partial  bool       `json:"partial"`
		Searched int64      `json:"searched"`
		Bound    *boundView `json:"bound"`
	}{c.N, c.Capped, c.Partial, c.Searched, b})
}

// writeCount answers a dry run or a synchronous action: how many rows.
func writeCount(w http.ResponseWriter, n int64) {
	writeJSON(w, http.StatusOK, struct {
		Count int64 `json:"count"`
	}{n})
}

// startJob runs an action over f as a tracked job, which sets its total
// (the rows it is pinned to) and progress, and answers 202 with the job.
func (s *Server) startJob(w http.ResponseWriter, r *http.Request, t *table, f outbox.Filter, view JobView,
	run func(ctx context.Context, j *job) (int64, error)) {
	// A filter the store would refuse is this request's 400, not a job
	// that fails once started.
	if err := t.admin.CheckFilter(r.Context(), f); err != nil {
		s.answerErr(w, r, asRequestError(err))
		return
	}
	job, err := s.jobs.start(r.Context(), view, run)
	if err != nil {
		w.Header().Set("Retry-After", "5")
		apiError(w, http.StatusTooManyRequests, "too_many_jobs",
			fmt.Sprintf("%d jobs are running, the most at once: wait for one to end or cancel one (POST /api/v1/jobs/{id}/cancel)", MaxRunningJobs))
		return
	}
	writeJSON(w, http.StatusAccepted, struct {
		Job JobView `json:"job"`
	}{job})
}

// apiRetryNow makes one message that waits for a later attempt due now:
// 200 {"count": 1}; 409 not_waiting when it does not wait (being
// delivered, delivered, dead, or due already), 404 when there is none.
func (s *Server) apiRetryNow(w http.ResponseWriter, r *http.Request, p principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	id, err := pathID(r)
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	moved, err := t.admin.RetryNow(r.Context(), p.actor, id)
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	if len(moved) == 0 {
		m, err := t.admin.Message(r.Context(), id)
		switch {
		case errors.Is(err, outbox.ErrNotFound):
			apiError(w, http.StatusNotFound, "not_found", "no message "+r.PathValue("id")+" in "+t.name)
		case err != nil:
			s.answerErr(w, r, err)
		case m.Status == "pending":
			apiError(w, http.StatusConflict, "not_waiting", "message "+r.PathValue("id")+" is due already")
		default:
			apiError(w, http.StatusConflict, "not_waiting", "message "+r.PathValue("id")+" does not wait for a later attempt: it is "+m.Status)
		}
		return
	}
	writeCount(w, int64(len(moved)))
}
