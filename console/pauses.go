package console

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/outboxd/outbox"
)

// pauseRequest is the optional body of a pause: why.
type pauseRequest struct {
	Reason string `json:"reason"`
}

// PauseAnswer is a pause's answer: the pause in force, and whether this
// request made it (false: it was paused already, unchanged).
type PauseAnswer struct {
	Pause outbox.Pause `json:"pause"`
	Made  bool         `json:"made"`
}

// ResumeAnswer is a resume's answer: the pause lifted and how many held
// messages were made due.
type ResumeAnswer struct {
	Lifted outbox.Pause `json:"lifted"`
	Woke   int64        `json:"woke"`
}

// pauseRoute is the route a request names ("" for the table's own
// endpoints), or false after a 400.
func pauseRoute(w http.ResponseWriter, r *http.Request) (string, bool) {
	route, whole := r.PathValue("route"), !strings.Contains(r.URL.Path, "/routes/")
	if whole {
		return "", true
	}
	if err := outbox.CheckPauseRoute(route); err != nil {
		apiError(w, http.StatusBadRequest, "bad_route", err.Error())
		return "", false
	}
	return route, true
}

// apiPause pauses a route (POST .../routes/{route}/pause) or the whole
// table (POST .../pause), with an optional {"reason": "..."}: 200 with
// the pause in force, made false when it was paused already.
func (s *Server) apiPause(w http.ResponseWriter, r *http.Request, p principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	route, ok := pauseRoute(w, r)
	if !ok {
		return
	}
	var req pauseRequest
	if r.ContentLength != 0 {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			apiError(w, http.StatusRequestEntityTooLarge, "too_large", "request body over 1 MiB")
			return
		}
		if len(strings.TrimSpace(string(body))) > 0 && !decodeBytes(w, body, &req) {
			return
		}
	}
	if err := outbox.CheckPauseReason(req.Reason); err != nil {
		apiError(w, http.StatusBadRequest, "bad_reason", err.Error())
		return
	}
	pause, made, err := t.admin.Pause(r.Context(), p.actor, route, req.Reason)
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, PauseAnswer{Pause: pause, Made: made})
}

// apiResume lifts a pause: 200 with the pause lifted and how many held
// messages were made due; 409 not_paused when it was not paused.
func (s *Server) apiResume(w http.ResponseWriter, r *http.Request, p principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	route, ok := pauseRoute(w, r)
	if !ok {
		return
	}
	lifted, woke, err := t.admin.Resume(r.Context(), p.actor, route)
	if errors.Is(err, outbox.ErrNotPaused) {
		what := "table " + t.name
		if route != "" {
			what = "route " + route + " of " + t.name
		}
		apiError(w, http.StatusConflict, "not_paused", what+" is not paused")
		return
	}
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ResumeAnswer{Lifted: lifted, Woke: woke})
}

// apiPauses lists the pauses in force: {"pauses": [...]}, the whole
// table's (route "") first.
func (s *Server) apiPauses(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	ps, err := t.admin.Pauses(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Pauses []outbox.Pause `json:"pauses"`
	}{ps})
}
