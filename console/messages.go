package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// MessageView is a message in a list.
type MessageView struct {
	ID            int64      `json:"id"`
	AggregateType string     `json:"aggregate_type"`
	AggregateID   string     `json:"aggregate_id"`
	EventType     string     `json:"event_type"`
	Status        string     `json:"status"`
	Attempts      int        `json:"attempts"`
	CreatedAt     time.Time  `json:"created_at"`
	AvailableAt   time.Time  `json:"available_at"`
	DoneAt        *time.Time `json:"done_at"`
	LeaseOwner    *string    `json:"lease_owner"`
	LeaseUntil    *time.Time `json:"lease_until"`
	LastError     *string    `json:"last_error"`
}

// MessageDetailView is one message with its payload, headers and fencing token.
type MessageDetailView struct {
	MessageView
	LeaseVersion int64 `json:"lease_version"`
	// UID is the message's identity, which sinks send as its id; "" for a
	// row from before the uid column, sent under its numeric id.
	UID     string            `json:"uid"`
	Payload json.RawMessage   `json:"payload"`
	Headers map[string]string `json:"headers"`
	// History is the attempt history, newest first: every publish that
	// did not deliver the message, up to the newest the dispatchers keep.
	History []AttemptView `json:"history"`
	// NotSent names the headers a sink leaves out, each with why: by
	// every sink ("not sent: ..."), or by the webhook sink ("not sent
	// over HTTP: ..."). Sinks log each such header once per message.
	NotSent map[string]string `json:"not_sent"`
}

// AttemptView is one entry of a message's attempt history. Status is the
// receiver's status code (an HTTP status), null when the sink has none.
type AttemptView struct {
	At         time.Time `json:"at"`
	Dispatcher string    `json:"dispatcher"`
	Attempt    int       `json:"attempt"`
	DurationMS float64   `json:"duration_ms"`
	Outcome    string    `json:"outcome"`
	Error      string    `json:"error"`
	Status     *int      `json:"status"`
}

// DetailView is m as the message API returns it (and `outboxd show
// --json` prints it).
func DetailView(m *outbox.MessageDetail) *MessageDetailView {
	return &MessageDetailView{MessageView: messageView(m.MessageSummary), LeaseVersion: m.LeaseVersion, UID: m.UID,
		Payload: m.Payload, Headers: m.Headers, History: attemptViews(m.History), NotSent: notSent(m.Headers)}
}

// notSent is, for each header a sink leaves out, why.
func notSent(headers map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range headers {
		if why := sinkutil.NotSent(k); why != "" {
			out[k] = "not sent by any sink: " + why
		} else if why := httpsink.NotSent(k, v); why != "" {
			out[k] = "not sent over HTTP (webhooks): " + why
		}
	}
	return out
}

// Took is the attempt's duration for a person: microseconds under a
// millisecond, then milliseconds, then seconds.
func (a AttemptView) Took() string {
	switch ms := a.DurationMS; {
	case ms < 1:
		return strconv.FormatFloat(ms*1000, 'f', 0, 64) + " µs"
	case ms < 1000:
		return strconv.FormatFloat(ms, 'f', 1, 64) + " ms"
	default:
		return strconv.FormatFloat(ms/1000, 'f', 2, 64) + " s"
	}
}

func attemptViews(h []outbox.Attempt) []AttemptView {
	out := make([]AttemptView, len(h))
	for i, a := range h {
		out[i] = AttemptView{At: a.At, Dispatcher: a.Dispatcher, Attempt: a.Attempt,
			DurationMS: float64(a.Duration.Microseconds()) / 1000, Outcome: string(a.Outcome), Error: a.Error}
		if a.Status != 0 {
			out[i].Status = &a.Status
		}
	}
	return out
}

// CountView is a match count; capped means "at least N". Partial means
// only the newest Searched rows were counted (the filter has a term no
// index serves); ExactTimedOut that an exact count was asked for and did
// not finish within Config.ExactCountTimeout, so N is the bounded count.
type CountView struct {
	N             int64 `json:"n"`
	Capped        bool  `json:"capped"`
	Partial       bool  `json:"partial"`
	Searched      int64 `json:"searched"`
	ExactTimedOut bool  `json:"exact_timed_out"`
}

func messageView(m outbox.MessageSummary) MessageView {
	return MessageView{
		ID: m.ID, AggregateType: m.AggregateType, AggregateID: m.AggregateID, EventType: m.EventType,
		Status: m.Status, Attempts: m.Attempts, CreatedAt: m.CreatedAt, AvailableAt: m.AvailableAt,
		DoneAt: m.DoneAt, LeaseOwner: m.LeaseOwner, LeaseUntil: m.LeaseUntil, LastError: m.LastError,
	}
}

// listing is one page of messages matching a filter, with its capped
// count. Partial means the search window ran out before the page filled:
// Searched rows were read, and Next goes on past them.
type listing struct {
	Rows     []MessageView
	Next     int64
	Partial  bool
	Searched int64
	Count    CountView
}

func (s *Server) list(r *http.Request, t *table, force string) (listing, error) {
	l, f, err := s.listNoCount(r, t, force, true)
	if err != nil {
		return l, err
	}
	l.Count, err = s.count(r, t, f, r.URL.Query().Get("exact") == "1")
	return l, err
}

// count is the bounded count of f; with exact, an exact count if one
// finishes within Config.ExactCountTimeout.
func (s *Server) count(r *http.Request, t *table, f outbox.Filter, exact bool) (CountView, error) {
	c, err := t.admin.CountWindow(r.Context(), f, s.cfg.SearchWindow)
	if err != nil {
		return CountView{}, asRequestError(err)
	}
	v := CountView{N: c.N, Capped: c.Capped, Partial: c.Partial, Searched: c.Searched}
	if !exact || !c.Capped {
		return v, nil // not capped: already exact
	}
	n, ok, err := t.admin.CountExactWithin(r.Context(), f, s.cfg.ExactCountTimeout)
	switch {
	case err != nil:
		return CountView{}, asRequestError(err)
	case !ok:
		v.ExactTimedOut = true
		return v, nil
	}
	return CountView{N: n}, nil
}

// asRequestError turns the library's input errors (a bad replay name or
// rate) into client errors; a *outbox.FilterError stays one, to be
// answered as bad_filter.
func asRequestError(err error) error {
	var re *outbox.ReplayOptsError
	if errors.As(err, &re) {
		return &requestError{msg: cleanErr(err)}
	}
	return err
}

// answerErr maps an error to 400 (bad_filter, bad input) or 500.
func (s *Server) answerErr(w http.ResponseWriter, r *http.Request, err error) {
	var fe *outbox.FilterError
	if errors.As(err, &fe) {
		apiFilterError(w, fe)
		return
	}
	var re *requestError
	if errors.As(err, &re) {
		apiError(w, http.StatusBadRequest, "bad_request", re.msg)
		return
	}
	s.internalError(w, r, err)
}

// inputError is err's message when it is the client's fault (a filter,
// another bad input), for a page to show.
func inputError(err error) (string, bool) {
	var fe *outbox.FilterError
	var re *requestError
	if errors.As(err, &fe) || errors.As(err, &re) {
		return cleanErr(err), true
	}
	return "", false
}

func (s *Server) apiMessages(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	l, _, err := s.listNoCount(r, t, "", false)
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	var next *int64
	if l.Next != 0 {
		next = &l.Next
	}
	writeJSON(w, http.StatusOK, struct {
		Messages []MessageView `json:"messages"`
		Next     *int64        `json:"next_after"`
		Partial  bool          `json:"partial"`
		Searched int64         `json:"searched"`
	}{l.Rows, next, l.Partial, l.Searched})
}

// listNoCount is one page of messages without the count (the API has
// /count). page says the request is a page's, whose form leaves empty
// fields, not an API call's.
func (s *Server) listNoCount(r *http.Request, t *table, force string, page bool) (listing, outbox.Filter, error) {
	q := r.URL.Query()
	var f outbox.Filter
	var err error
	if page {
		f, err = pageFilter(q, force)
	} else {
		f, err = queryFilter(q, force, "after", "limit", "order")
	}
	if err != nil {
		return listing{}, f, err
	}
	p, err := parsePage(q)
	if err != nil {
		return listing{}, f, err
	}
	found, err := t.admin.Search(r.Context(), f, p, s.cfg.SearchWindow)
	if err != nil {
		return listing{}, f, asRequestError(err)
	}
	out := listing{Rows: make([]MessageView, len(found.Messages)), Next: found.Next, Partial: found.Partial, Searched: found.Searched}
	for i, m := range found.Messages {
		out.Rows[i] = messageView(m)
	}
	return out, f, nil
}

func (s *Server) apiCount(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	q := r.URL.Query()
	f, err := queryFilter(q, "", "exact")
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	c, err := s.count(r, t, f, q.Get("exact") == "1")
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// pathID is the message id of the request's path, or a *requestError
// naming what is there instead.
func pathID(r *http.Request) (int64, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, errorf("%q is not a message id", r.PathValue("id"))
	}
	return id, nil
}

func (s *Server) detail(r *http.Request, t *table) (*MessageDetailView, error) {
	id, err := pathID(r)
	if err != nil {
		return nil, err
	}
	m, err := t.admin.Message(r.Context(), id)
	if err != nil {
		return nil, err
	}
	return DetailView(m), nil
}

func (s *Server) apiMessage(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	m, err := s.detail(r, t)
	if errors.Is(err, outbox.ErrNotFound) {
		apiError(w, http.StatusNotFound, "not_found", "no message "+r.PathValue("id")+" in "+t.name)
		return
	}
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, m)
}

// listPage is the data of the messages, dead-letter and replay pages.
type listPage struct {
	pageData
	filterForm
	listing
	Select                         bool
	After                          int64
	NextLink, FirstLink, ExactLink string
	ExactTimeout                   time.Duration
}

// filterForm is what the filter form shows.
type filterForm struct {
	Action        string
	Q             url.Values
	ShowStatus    bool
	StatusChoices []statusChoice
	Err           string
}

type statusChoice struct {
	Name string
	On   bool
}

func (s *Server) listPage(w http.ResponseWriter, r *http.Request, t *table, base pageData, force string) {
	q := r.URL.Query()
	action := "/t/" + url.PathEscape(t.name) + "/" + base.Page
	data := listPage{pageData: base, filterForm: filterForm{Action: action, Q: q, ShowStatus: force == ""}}
	on := map[string]bool{}
	for _, v := range q["status"] {
		for _, s := range splitComma(v) {
			on[s] = true
		}
	}
	for _, st := range []string{"pending", "processing", "done", "dead"} {
		data.StatusChoices = append(data.StatusChoices, statusChoice{st, on[st]})
	}
	l, err := s.list(r, t, force)
	msg, bad := inputError(err)
	switch {
	case bad:
		w.WriteHeader(http.StatusBadRequest)
		data.Err = msg
	case err != nil:
		s.pageDBError(w, r, base, err)
		return
	}
	data.listing = l
	data.After, _ = strconv.ParseInt(q.Get("after"), 10, 64)
	data.NextLink = withParam(action, q, "after", strconv.FormatInt(l.Next, 10))
	data.FirstLink = withParam(action, q, "after", "")
	data.ExactLink = withParam(action, q, "exact", "1")
	data.ExactTimeout = s.cfg.ExactCountTimeout
	data.Select = force == "dead" && s.cfg.Write
	s.render(w, base.Page, data)
}

func withParam(path string, q url.Values, k, v string) string {
	c := url.Values{}
	for key, vs := range q {
		c[key] = append([]string(nil), vs...)
	}
	if v == "" {
		c.Del(k)
	} else {
		c.Set(k, v)
	}
	if len(c) == 0 {
		return path
	}
	return path + "?" + c.Encode()
}

func (s *Server) messagesPage(w http.ResponseWriter, r *http.Request, t *table, base pageData) {
	base.Title, base.Page = "Messages", "messages"
	s.listPage(w, r, t, base, "")
}

func (s *Server) deadPage(w http.ResponseWriter, r *http.Request, t *table, base pageData) {
	base.Title, base.Page = "Dead letters", "dead"
	s.listPage(w, r, t, base, "dead")
}

func (s *Server) replayPage(w http.ResponseWriter, r *http.Request, t *table, base pageData) {
	base.Title, base.Page = "Replay", "replay"
	s.listPage(w, r, t, base, "done")
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
