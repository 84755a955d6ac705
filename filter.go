package outbox

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Filter selects messages for the console, the CLI and the bulk actions.
// Zero fields match everything; set fields must all match.
type Filter struct {
	Status        []string  // any of pending, processing, done, dead
	EventType     string    // exact match
	AggregateType string    // exact match
	AggregateID   string    // exact match
	IDs           []int64   // any of these ids (a selection)
	IDMin, IDMax  int64     // inclusive; 0 means unbounded
	CreatedAfter  time.Time // created_at >= this; zero means unbounded
	CreatedBefore time.Time // created_at < this; zero means unbounded
	ErrorContains string    // case-insensitive substring of last_error
	// PayloadPath is an SQL/JSON path predicate on the payload, such as
	// `$.amount > 100`, matched with jsonb @@: a path that is not a
	// predicate (`$.amount`) matches nothing.
	PayloadPath string
	HeaderPath  string // the same on the headers, e.g. `$.tenant == "acme"`
}

// FilterError reports a filter term that cannot be used.
type FilterError struct {
	Term string // the term as given (or its canonical form)
	Err  error
}

func (e *FilterError) Error() string { return fmt.Sprintf("filter %q: %v", e.Term, e.Err) }
func (e *FilterError) Unwrap() error { return e.Err }

// statuses in the order Terms and Query list them.
var statuses = []string{"pending", "processing", "done", "dead"}

// ParseFilter reads CLI terms, one per --filter:
//
//	status=dead  status=pending,processing  event_type=OrderPaid
//	aggregate_type=order  aggregate_id=42  id=7,8,9  id>=100  id<=200
//	created_at>=2026-12-01T00:00:00Z  created_at<2026-12-02  error~timeout
//	payload=$.amount > 100  header=$.tenant == "acme"
//
// A date without a time is midnight UTC. A bad or repeated term is a
// [*FilterError] naming it. Paths are checked by the database when the
// filter is first used.
func ParseFilter(terms []string) (Filter, error) {
	var f Filter
	seen := map[string]bool{}
	for _, term := range terms {
		key, op, value := splitTerm(term)
		if err := f.setTerm(key, op, value, seen); err != nil {
			return Filter{}, &FilterError{Term: term, Err: err}
		}
	}
	return f, nil
}

// splitTerm cuts "key<op>value" after the leading name.
func splitTerm(term string) (key, op, value string) {
	i := strings.IndexFunc(term, func(r rune) bool { return r != '_' && (r < 'a' || r > 'z') })
	if i < 0 {
		return term, "", ""
	}
	key, rest := term[:i], term[i:]
	for _, o := range []string{">=", "<=", "=", "<", "~"} {
		if strings.HasPrefix(rest, o) {
			return key, o, rest[len(o):]
		}
	}
	return key, rest, ""
}

func (f *Filter) setTerm(key, op, value string, seen map[string]bool) error {
	name := key + op
	if _, known := queryKeys[name]; !known && name != "status=" {
		return errors.New("unknown term (want status=, event_type=, aggregate_type=, aggregate_id=, " +
			"id=, id>=, id<=, created_at>=, created_at<, error~, payload= or header=)")
	}
	if key != "status" && seen[name] {
		return errors.New("given twice")
	}
	seen[name] = true
	if value == "" {
		return errors.New("no value")
	}
	switch name {
	case "status=":
		return f.addStatuses(strings.Split(value, ","))
	case "event_type=":
		f.EventType = value
	case "aggregate_type=":
		f.AggregateType = value
	case "aggregate_id=":
		f.AggregateID = value
	case "id=":
		return f.addIDs(strings.Split(value, ","))
	case "id>=":
		return parseID(value, &f.IDMin)
	case "id<=":
		return parseID(value, &f.IDMax)
	case "created_at>=":
		return parseTime(value, &f.CreatedAfter)
	case "created_at<":
		return parseTime(value, &f.CreatedBefore)
	case "error~":
		f.ErrorContains = value
	case "payload=":
		f.PayloadPath = value
	case "header=":
		f.HeaderPath = value
	}
	return nil
}

func (f *Filter) addStatuses(values []string) error {
	for _, s := range values {
		s = strings.TrimSpace(s)
		if !slices.Contains(statuses, s) {
			return fmt.Errorf("unknown status %q (want pending, processing, done or dead)", s)
		}
		if !slices.Contains(f.Status, s) {
			f.Status = append(f.Status, s)
		}
	}
	return nil
}

func (f *Filter) addIDs(values []string) error {
	for _, v := range values {
		var id int64
		if err := parseID(strings.TrimSpace(v), &id); err != nil {
			return err
		}
		if !slices.Contains(f.IDs, id) {
			f.IDs = append(f.IDs, id)
		}
	}
	return nil
}

func parseID(s string, dst *int64) error {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return fmt.Errorf("%q is not a message id", s)
	}
	*dst = id
	return nil
}

func parseTime(s string, dst *time.Time) error {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			*dst = t
			return nil
		}
	}
	return fmt.Errorf("%q is not an RFC 3339 time or a date (2006-01-02T15:04:05Z, 2006-01-02)", s)
}

// Terms returns f as CLI terms in a fixed order: what the audit table
// records. ParseFilter(f.Terms()) is f again.
func (f Filter) Terms() []string {
	var out []string
	if s := f.sortedStatus(); len(s) > 0 {
		out = append(out, "status="+strings.Join(s, ","))
	}
	for _, kv := range f.pairs() {
		if kv[1] != "" {
			out = append(out, kv[0]+kv[1])
		}
	}
	return out
}

// pairs lists every field but the statuses as (term prefix, value).
func (f Filter) pairs() [][2]string {
	id := func(n int64) string {
		if n == 0 {
			return ""
		}
		return strconv.FormatInt(n, 10)
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	ids := make([]string, len(f.IDs))
	for i, n := range f.IDs {
		ids[i] = id(n)
	}
	return [][2]string{
		{"event_type=", f.EventType}, {"aggregate_type=", f.AggregateType}, {"aggregate_id=", f.AggregateID},
		{"id=", strings.Join(ids, ",")}, {"id>=", id(f.IDMin)}, {"id<=", id(f.IDMax)},
		{"created_at>=", at(f.CreatedAfter)}, {"created_at<", at(f.CreatedBefore)},
		{"error~", f.ErrorContains}, {"payload=", f.PayloadPath}, {"header=", f.HeaderPath},
	}
}

func (f Filter) sortedStatus() []string {
	var out []string
	for _, s := range statuses {
		if slices.Contains(f.Status, s) {
			out = append(out, s)
		}
	}
	return out
}

// queryKeys maps the term prefixes of pairs to URL query keys.
var queryKeys = map[string]string{
	"event_type=": "event_type", "aggregate_type=": "aggregate_type", "aggregate_id=": "aggregate_id",
	"id=": "id", "id>=": "id_min", "id<=": "id_max", "created_at>=": "created_after",
	"created_at<": "created_before", "error~": "error", "payload=": "payload", "header=": "header",
}

// FilterFromQuery reads a filter from URL query parameters: status
// (repeatable or a comma list), event_type, aggregate_type, aggregate_id,
// id (repeatable or a comma list), id_min, id_max, created_after,
// created_before (RFC 3339 or a date), error, payload and header. Empty
// values and other keys (paging, say) are ignored.
func FilterFromQuery(q url.Values) (Filter, error) {
	var terms []string
	for _, v := range q["status"] {
		if v != "" {
			terms = append(terms, "status="+v)
		}
	}
	prefixes := make([]string, 0, len(queryKeys))
	for prefix := range queryKeys {
		prefixes = append(prefixes, prefix)
	}
	slices.Sort(prefixes)
	for _, prefix := range prefixes {
		key := queryKeys[prefix]
		vs := q[key]
		if key == "id" && len(vs) > 1 {
			vs = []string{strings.Join(vs, ",")}
		}
		for _, v := range vs {
			if v != "" {
				terms = append(terms, prefix+v)
			}
		}
	}
	f, err := ParseFilter(terms)
	var fe *FilterError
	if errors.As(err, &fe) {
		// Name the parameter, not the CLI term it became.
		term := fe.Term // status= is both
		for prefix, key := range queryKeys {
			if v, ok := strings.CutPrefix(fe.Term, prefix); ok {
				term = key + "=" + v
			}
		}
		return Filter{}, &FilterError{Term: term, Err: fe.Err}
	}
	return f, err
}

// Query returns f as URL query parameters, the inverse of FilterFromQuery.
func (f Filter) Query() url.Values {
	q := url.Values{}
	if s := f.sortedStatus(); len(s) > 0 {
		q.Set("status", strings.Join(s, ","))
	}
	for _, kv := range f.pairs() {
		if kv[1] != "" {
			q.Set(queryKeys[kv[0]], kv[1])
		}
	}
	return q
}
