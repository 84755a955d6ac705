//go:build !contract1

package console

import (
	"context"
	"net/http"
)

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
