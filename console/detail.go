package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"time"

	"github.com/outboxd/outbox"
)

// timelineStep is one line of a message's timeline.
type timelineStep struct {
	What, Note, Class string
	When              template.HTML // times as formatWhen renders them
	// Attempt is the attempt this step tells of, when it is one from the
	// history: the step then opens to its error and dispatcher.
	Attempt *AttemptView
}

// timeline tells a message's life from its columns and its attempt
// history: created, each claim (the fencing token counts them), each
// attempt that did not deliver it (oldest first), its lease, and how it
// finished.
func timeline(m *MessageDetailView) []timelineStep {
	steps := []timelineStep{{What: "Created", When: formatWhen(m.CreatedAt)}}
	if m.LeaseVersion > 0 {
		note := ""
		if m.LeaseOwner != nil {
			note = "last by " + *m.LeaseOwner
		}
		steps = append(steps, timelineStep{What: "Claimed " + formatInt(m.LeaseVersion) + "×", When: template.HTML("attempts " + formatInt(int64(m.Attempts))), Note: note})
	}
	for i := len(m.History) - 1; i >= 0; i-- {
		a := &m.History[i]
		what := "Attempt " + formatInt(int64(a.Attempt)) + ": " + attemptOutcome[a.Outcome]
		if a.Status != nil {
			what += " (" + formatInt(int64(*a.Status)) + ")"
		}
		class := "failed"
		if a.Outcome == string(outbox.OutcomeDead) {
			class = "dead"
		}
		steps = append(steps, timelineStep{What: what, When: formatWhen(a.At), Class: class, Attempt: a})
	}
	switch m.Status {
	case "processing":
		steps = append(steps, timelineStep{What: "Lease held", When: "until " + formatWhen(m.LeaseUntil), Class: "future"})
	case "pending":
		what := "Waiting"
		if m.Attempts > 0 {
			what = "Retry scheduled"
		}
		steps = append(steps, timelineStep{What: what, When: "available " + formatWhen(m.AvailableAt), Class: "future"})
	case "done":
		steps = append(steps, timelineStep{What: "Delivered", When: formatWhen(m.DoneAt)})
	case "dead":
		steps = append(steps, timelineStep{What: "Dead", When: formatWhen(m.DoneAt), Note: deref(m.LastError), Class: "dead"})
	}
	return steps
}

// attemptOutcome says what an attempt of the history came to.
var attemptOutcome = map[string]string{
	string(outbox.OutcomeRetry): "failed, retried",
	string(outbox.OutcomeDefer): "deferred",
	string(outbox.OutcomeDead):  "failed, dead",
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func prettyJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

func (s *Server) messagePage(w http.ResponseWriter, r *http.Request, t *table, base pageData) {
	base.Page = "message"
	m, err := s.detail(r, t)
	var re *requestError
	switch {
	case errors.Is(err, outbox.ErrNotFound):
		s.pageError(w, base, http.StatusNotFound, "No message "+r.PathValue("id")+" in "+t.name+".")
		return
	case errors.As(err, &re):
		s.pageError(w, base, http.StatusBadRequest, re.msg)
		return
	case err != nil:
		s.pageDBError(w, r, base, err)
		return
	}
	base.Title = "Message " + r.PathValue("id")
	s.render(w, "message", struct {
		pageData
		M        *MessageDetailView
		Timeline []timelineStep
		Payload  string
		// Waiting: pending and due later (a retry's backoff, a defer),
		// which "Retry now" makes due at once.
		Waiting bool
	}{base, m, timeline(m), prettyJSON(m.Payload), m.Status == "pending" && m.AvailableAt.After(time.Now())})
}
