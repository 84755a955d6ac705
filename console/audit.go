package console

import (
	"context"
	"net/http"
	"time"
)

// AuditView is one audit row.
type AuditView struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Filter []string  `json:"filter"`
	Count  int64     `json:"count"`
	DryRun bool      `json:"dry_run"`
}

func (s *Server) auditList(ctx context.Context, t *table, limit int) ([]AuditView, error) {
	es, err := t.admin.AuditList(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]AuditView, len(es))
	for i, e := range es {
		out[i] = AuditView{At: e.At, Actor: e.Actor, Action: e.Action, Filter: e.Filter, Count: e.Count, DryRun: e.DryRun}
	}
	return out, nil
}

func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	limit, ok := intParam(w, r, "limit", 100, 1000)
	if !ok {
		return
	}
	es, err := s.auditList(r.Context(), t, limit)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Entries []AuditView `json:"entries"`
	}{es})
}

func (s *Server) auditPage(w http.ResponseWriter, r *http.Request, t *table, base pageData) {
	base.Title, base.Page = "Audit", "audit"
	es, err := s.auditList(r.Context(), t, 200)
	if err != nil {
		s.pageDBError(w, r, base, err)
		return
	}
	s.render(w, "audit", struct {
		pageData
		Entries []AuditView
		Jobs    []JobView
	}{base, es, s.jobs.all()})
}
