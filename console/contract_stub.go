//go:build !contract

package console

import (
	"context"
	"net/http"
)

func breakdowns(context.Context, *table) ([]BreakdownView, []BreakdownView, error) {
	return nil, nil, nil
}

func dispatchers(context.Context, *table) ([]DispatcherView, error) { return nil, nil }

func newestID(context.Context, *table) (int64, error) { return 0, nil }

func notYet(w http.ResponseWriter, _ *http.Request, _ principal) {
	apiError(w, http.StatusNotImplemented, "not_implemented", "needs the library's filters")
}

func notYetPage(w http.ResponseWriter, _ *http.Request, _ *table, _ pageData) {
	http.Error(w, "needs the library's filters", http.StatusNotImplemented)
}

func (s *Server) apiMessages(w http.ResponseWriter, r *http.Request, p principal) { notYet(w, r, p) }
func (s *Server) apiMessage(w http.ResponseWriter, r *http.Request, p principal)  { notYet(w, r, p) }
func (s *Server) apiCount(w http.ResponseWriter, r *http.Request, p principal)    { notYet(w, r, p) }
func (s *Server) apiAudit(w http.ResponseWriter, r *http.Request, p principal)    { notYet(w, r, p) }
func (s *Server) apiReplay(w http.ResponseWriter, r *http.Request, p principal)   { notYet(w, r, p) }
func (s *Server) apiDeadAction(string) apiHandler                                 { return notYet }

func (s *Server) messagesPage(w http.ResponseWriter, r *http.Request, t *table, b pageData) {
	notYetPage(w, r, t, b)
}
func (s *Server) messagePage(w http.ResponseWriter, r *http.Request, t *table, b pageData) {
	notYetPage(w, r, t, b)
}
func (s *Server) deadPage(w http.ResponseWriter, r *http.Request, t *table, b pageData) {
	notYetPage(w, r, t, b)
}
func (s *Server) replayPage(w http.ResponseWriter, r *http.Request, t *table, b pageData) {
	notYetPage(w, r, t, b)
}
func (s *Server) auditPage(w http.ResponseWriter, r *http.Request, t *table, b pageData) {
	notYetPage(w, r, t, b)
}
