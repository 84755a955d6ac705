package console

import (
	"context"
	"net/http"

	"github.com/outboxd/outbox"
)

// maxIDs is how many ids one retry or skip of a selection may name.
const maxIDs = 500

type deadRequest struct {
	IDs    []int64    `json:"ids"`
	Filter filterBody `json:"filter"`
	DryRun bool       `json:"dry_run"`
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
		switch {
		case len(req.IDs) > 0 && req.Filter != nil:
			apiError(w, http.StatusBadRequest, "bad_request", "give ids or a filter, not both")
		case len(req.IDs) > maxIDs:
			apiError(w, http.StatusBadRequest, "bad_request", "at most 500 ids at once; use a filter for more")
		case len(req.IDs) > 0:
			s.deadIDs(w, r, p, t, action, req)
		case req.Filter != nil:
			s.deadMatching(w, r, p, t, action, req)
		default:
			apiError(w, http.StatusBadRequest, "bad_request", `give "ids" or a "filter" ({} matches every dead message)`)
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
	f, ok := bodyFilter(w, req.Filter, "dead")
	if !ok {
		return
	}
	run := s.bulkFunc(t, action)
	if req.DryRun {
		s.preview(w, r, t, "dead_"+action, f, outbox.PreviewOpts{Actor: p.actor})
		return
	}
	view := JobView{Kind: "dead_" + action, Table: t.name, Actor: p.actor, Filter: f.Terms()}
	s.startJob(w, r, t, f, view, func(ctx context.Context, progress func(int64)) (int64, error) {
		return run(ctx, f, outbox.BulkOpts{Actor: p.actor, Progress: progress})
	})
}

type replayRequest struct {
	Name   string     `json:"name"`
	Rate   float64    `json:"rate"`
	Filter filterBody `json:"filter"`
	DryRun bool       `json:"dry_run"`
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
	f, ok := bodyFilter(w, req.Filter, "done")
	if !ok {
		return
	}
	opts := outbox.ReplayOpts{Name: req.Name, Rate: req.Rate, Actor: p.actor}
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
	s.startJob(w, r, t, f, view, func(ctx context.Context, progress func(int64)) (int64, error) {
		opts.Progress = progress
		return t.admin.Replay(ctx, f, opts)
	})
}

// bodyFilter parses a request's filter with its status forced to status,
// answering 400 itself when it cannot.
func bodyFilter(w http.ResponseWriter, body filterBody, status string) (outbox.Filter, bool) {
	q, err := body.values()
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return outbox.Filter{}, false
	}
	f, err := parseFilter(q, status)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", cleanErr(err))
		return outbox.Filter{}, false
	}
	return f, true
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
	writeJSON(w, http.StatusOK, struct {
		Count    int64 `json:"count"`
		Capped   bool  `json:"capped"`
		Partial  bool  `json:"partial"`
		Searched int64 `json:"searched"`
	}{c.N, c.Capped, c.Partial, c.Searched})
}

// writeCount answers a dry run or a synchronous action: how many rows.
func writeCount(w http.ResponseWriter, n int64) {
	writeJSON(w, http.StatusOK, struct {
		Count int64 `json:"count"`
	}{n})
}

// startJob runs an action over f as a tracked job, its total taken from an
// exact count first, and answers 202 with the job.
func (s *Server) startJob(w http.ResponseWriter, r *http.Request, t *table, f outbox.Filter, view JobView,
	run func(ctx context.Context, progress func(int64)) (int64, error)) {
	// A filter the store would refuse is this request's 400, not a job
	// that fails once started.
	if err := t.admin.CheckFilter(r.Context(), f); err != nil {
		s.answerErr(w, r, asRequestError(err))
		return
	}
	job := s.jobs.start(r.Context(), view, func(ctx context.Context, j *job) (int64, error) {
		if c, err := t.admin.Count(ctx, f, true); err == nil {
			j.setTotal(c.N)
		}
		return run(ctx, j.progress)
	})
	writeJSON(w, http.StatusAccepted, struct {
		Job JobView `json:"job"`
	}{job})
}
