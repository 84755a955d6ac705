//go:build !contract2

package console

import (
	"context"
	"net/http"
)

func breakdowns(context.Context, *table) ([]BreakdownView, []BreakdownView, error) {
	return nil, nil, nil
}

func dispatchers(context.Context, *table) ([]DispatcherView, error) { return nil, nil }

func notYet2(w http.ResponseWriter, _ *http.Request, _ principal) {
	apiError(w, http.StatusNotImplemented, "not_implemented", "needs the library's bulk actions")
}

func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request, p principal)  { notYet2(w, r, p) }
func (s *Server) apiReplay(w http.ResponseWriter, r *http.Request, p principal) { notYet2(w, r, p) }
func (s *Server) apiDeadAction(string) apiHandler                               { return notYet2 }

func (s *Server) auditPage(w http.ResponseWriter, _ *http.Request, _ *table, _ pageData) {
	http.Error(w, "needs the library's audit", http.StatusNotImplemented)
}
