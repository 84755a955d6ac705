package console

import (
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/outboxd/outbox"
)

// deadGroupView is a group of the top-errors page, with the link to the
// dead-letter page that selects it.
type deadGroupView struct {
	outbox.DeadGroup
	Link template.URL
}

// groupQuery is the dead-letter page's query for a group's filter terms
// ("event_type=X", "error=Y"; the page is narrowed to dead itself).
func groupQuery(terms []string) string {
	q := url.Values{}
	for _, term := range terms {
		k, v, ok := strings.Cut(term, "=")
		if ok && k != "status" {
			q.Add(k, v)
		}
	}
	// %20 rather than +: a + in an attribute is written as an entity.
	return strings.ReplaceAll(q.Encode(), "+", "%20")
}

// deadTopScan is how many dead messages the top-errors page reads.
const deadTopScan = outbox.DeadTopScanDefault

func (s *Server) deadTopPage(w http.ResponseWriter, r *http.Request, t *table, base pageData) {
	base.Title, base.Page = "Top errors", "dead"
	top, err := t.admin.DeadTop(r.Context(), 100, deadTopScan)
	if err != nil {
		s.pageDBError(w, r, base, err)
		return
	}
	groups := make([]deadGroupView, len(top.Groups))
	for i, g := range top.Groups {
		// The query is built here, escaped once: the template would
		// escape it again in a query's place.
		groups[i] = deadGroupView{DeadGroup: g,
			Link: template.URL("/t/" + url.PathEscape(t.name) + "/dead?" + groupQuery(g.Filter))} //nolint:gosec // path-escaped name and an encoded query
	}
	s.render(w, "deadtop", struct {
		pageData
		Top    *outbox.DeadTop
		Groups []deadGroupView
	}{base, top, groups})
}

// apiDeadTop answers the top errors as `outboxd dead top --json` prints
// them: ?limit (default 20, at most 1,000) groups, of the newest ?scan
// (default 10,000, at most 100,000) dead messages.
func (s *Server) apiDeadTop(w http.ResponseWriter, r *http.Request, _ principal) {
	t := s.tableOf(w, r)
	if t == nil {
		return
	}
	limit, ok := intParam(w, r, "limit", 20, 1000)
	if !ok {
		return
	}
	scan, ok := intParam(w, r, "scan", deadTopScan, 100_000)
	if !ok {
		return
	}
	top, err := t.admin.DeadTop(r.Context(), limit, scan)
	if err != nil {
		s.answerErr(w, r, err)
		return
	}
	if top.Groups == nil {
		top.Groups = []outbox.DeadGroup{}
	}
	writeJSON(w, http.StatusOK, top)
}

// intParam reads a positive integer query parameter of at most max, def
// when absent; a bad one is a 400 naming it.
func intParam(w http.ResponseWriter, r *http.Request, name string, def, maxV int) (int, bool) {
	raw := r.URL.Query().Get(name)
	if raw == "" {
		return def, true
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > maxV {
		apiError(w, http.StatusBadRequest, "bad_request", name+": want 1 to "+strconv.Itoa(maxV))
		return 0, false
	}
	return n, true
}
