package outbox

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outbox/internal/spelling"
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

// FilterError reports a filter term that cannot be used: an unknown term,
// a malformed or missing value, a term given twice, or one that cannot
// apply to the action.
type FilterError struct {
	Term string // the term's name as given, e.g. "event_type" or "evnt_type"
	Err  error
}

func (e *FilterError) Error() string { return fmt.Sprintf("filter %q: %v", e.Term, e.Err) }
func (e *FilterError) Unwrap() error { return e.Err }

// filterTerms are the names of the filter grammar, in the order Terms and
// Query list them. The CLI (--filter NAME=VALUE), the API's query strings
// and JSON bodies, and the console's forms all speak it.
var filterTerms = []string{
	"status", "event_type", "aggregate_type", "aggregate_id", "id", "id_min", "id_max",
	"created_after", "created_before", "error", "payload", "header",
}

// listTerms take a comma-separated list and may be given more than once.
var listTerms = map[string]bool{"status": true, "id": true}

// FilterTerms returns the names of the filter grammar's terms.
func FilterTerms() []string { return slices.Clone(filterTerms) }

// statuses in the order Terms and Query list them.
var statuses = []string{"pending", "processing", "done", "dead"}

// ParseFilter reads terms of the filter grammar, NAME=VALUE each:
//
//	status=dead  status=pending,processing  event_type=OrderPaid
//	aggregate_type=order  aggregate_id=42  id=7,8,9  id_min=100  id_max=200
//	created_after=2026-12-01T00:00:00Z  created_before=2026-12-02  error=timeout
//	payload=$.amount > 100  header=$.tenant == "acme"
//
// A date without a time is midnight UTC. An unknown term, a missing or
// malformed value, or a term other than status and id given twice is a
// [*FilterError] naming the term. Paths are checked by the database when
// the filter is first used ([Admin.CheckFilter]).
func ParseFilter(terms []string) (Filter, error) {
	b := filterBuilder{seen: map[string]bool{}}
	for _, term := range terms {
		name, value, ok := strings.Cut(term, "=")
		if !ok {
			return Filter{}, &FilterError{Term: leadingName(term), Err: fmt.Errorf("%q is not NAME=VALUE%s", term, oldForm(term))}
		}
		if err := b.add(name, value); err != nil {
			return Filter{}, err
		}
	}
	return b.f, nil
}

// FilterFromQuery reads a filter from URL query parameters, one per term of
// the grammar (status and id repeatable or comma lists). Every parameter
// must be a term with a value: the caller removes its own parameters
// (paging, say) first, and a form's empty fields. Errors are ParseFilter's.
func FilterFromQuery(q url.Values) (Filter, error) {
	b := filterBuilder{seen: map[string]bool{}}
	keys := slices.Sorted(maps.Keys(q))
	// Known terms in the grammar's order, then the unknown ones.
	slices.SortStableFunc(keys, func(x, y string) int { return termRank(x) - termRank(y) })
	for _, k := range keys {
		if len(q[k]) == 0 {
			return Filter{}, &FilterError{Term: k, Err: errors.New("no value")}
		}
		for _, v := range q[k] {
			if err := b.add(k, v); err != nil {
				return Filter{}, err
			}
		}
	}
	return b.f, nil
}

func termRank(name string) int {
	if i := slices.Index(filterTerms, name); i >= 0 {
		return i
	}
	return len(filterTerms)
}

// filterBuilder adds terms to a filter, refusing repeats.
type filterBuilder struct {
	f    Filter
	seen map[string]bool
	// ids are the ids of f.IDs: a long id list is deduplicated in linear
	// time (a list of 100,000 cost seconds of CPU searched one by one).
	ids map[int64]bool
}

func (b *filterBuilder) add(name, value string) error {
	err := b.set(name, value)
	if err != nil {
		return &FilterError{Term: name, Err: err}
	}
	return nil
}

func (b *filterBuilder) set(name, value string) error {
	if !slices.Contains(filterTerms, name) {
		return fmt.Errorf("unknown term%s (known: %s)", hint(name), strings.Join(filterTerms, ", "))
	}
	if b.seen[name] && !listTerms[name] {
		return errors.New("given twice")
	}
	b.seen[name] = true
	if value == "" {
		return errors.New("no value")
	}
	// PostgreSQL refuses both in a text value: the client's mistake, not
	// the server's.
	if strings.ContainsRune(value, 0) {
		return errors.New("contains a NUL byte")
	}
	if !utf8.ValidString(value) {
		return errors.New("is not valid UTF-8")
	}
	f := &b.f
	switch name {
	case "status":
		return f.addStatuses(strings.Split(value, ","))
	case "event_type":
		f.EventType = value
	case "aggregate_type":
		f.AggregateType = value
	case "aggregate_id":
		f.AggregateID = value
	case "id":
		return b.addIDs(strings.Split(value, ","))
	case "id_min":
		return parseID(value, &f.IDMin)
	case "id_max":
		return parseID(value, &f.IDMax)
	case "created_after":
		return parseTime(value, &f.CreatedAfter)
	case "created_before":
		return parseTime(value, &f.CreatedBefore)
	case "error":
		f.ErrorContains = value
	case "payload":
		f.PayloadPath = value
	case "header":
		f.HeaderPath = value
	}
	return nil
}

// leadingName is the name a term without '=' starts with.
func leadingName(term string) string {
	i := strings.IndexFunc(term, func(r rune) bool { return r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') })
	if i <= 0 {
		return term
	}
	return term[:i]
}

// oldTerms are names of earlier releases' CLI operators (id>=, id<=,
// created_at>=, created_at<=) as a cut at '=' leaves them, with the term
// that replaced each.
var oldTerms = map[string]string{"id>": "id_min", "id<": "id_max", "created_at>": "created_after", "created_at<": "created_before"}

// oldForm is " (did you mean NAME=...?)" for a term of earlier releases'
// CLI written without '=' (created_at<DATE, error~TEXT), or "".
func oldForm(term string) string {
	name := leadingName(term)
	op := strings.TrimPrefix(term, name)
	var want string
	switch {
	case strings.HasPrefix(op, "~") && name == "error":
		want = "error"
	case strings.HasPrefix(op, "<"):
		want = oldTerms[name+"<"]
	case strings.HasPrefix(op, ">"):
		want = oldTerms[name+">"]
	}
	if want == "" {
		return ""
	}
	return " (did you mean " + want + "=" + strings.TrimLeft(op, "<>~") + "?)"
}

// hint is " (did you mean X?)" for a misspelt or old term name, or "".
func hint(name string) string {
	if old, ok := oldTerms[name]; ok {
		return " (did you mean " + old + "?)"
	}
	norm := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	best, bestD := "", 3
	for _, t := range filterTerms {
		if d := spelling.Distance(norm, t); d < bestD {
			best, bestD = t, d
		}
	}
	if best != "" {
		return " (did you mean " + best + "?)"
	}
	return ""
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

func (b *filterBuilder) addIDs(values []string) error {
	if b.ids == nil {
		b.ids = map[int64]bool{}
	}
	for _, v := range values {
		var id int64
		if err := parseID(strings.TrimSpace(v), &id); err != nil {
			return err
		}
		if !b.ids[id] {
			b.ids[id] = true
			b.f.IDs = append(b.f.IDs, id)
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

// Terms returns f as terms of the grammar in a fixed order (what the audit
// table records and a job shows). ParseFilter(f.Terms()) is f again.
func (f Filter) Terms() []string {
	var out []string
	for _, kv := range f.pairs() {
		out = append(out, kv[0]+"="+kv[1])
	}
	return out
}

// Empty reports whether f matches every message of the statuses it names,
// or of every status: no term but status is set. A bulk write over such a
// filter acts on all of them, which its caller asks for explicitly.
func (f Filter) Empty() bool {
	g := f
	g.Status = nil
	return len(g.pairs()) == 0
}

// pairs lists the set terms as (name, value), in the grammar's order.
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
	all := [][2]string{
		{"status", strings.Join(f.sortedStatus(), ",")},
		{"event_type", f.EventType}, {"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID},
		{"id", strings.Join(ids, ",")}, {"id_min", id(f.IDMin)}, {"id_max", id(f.IDMax)},
		{"created_after", at(f.CreatedAfter)}, {"created_before", at(f.CreatedBefore)},
		{"error", f.ErrorContains}, {"payload", f.PayloadPath}, {"header", f.HeaderPath},
	}
	return slices.DeleteFunc(all, func(kv [2]string) bool { return kv[1] == "" })
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

// Query returns f as URL query parameters, the inverse of FilterFromQuery.
func (f Filter) Query() url.Values {
	q := url.Values{}
	for _, kv := range f.pairs() {
		q.Set(kv[0], kv[1])
	}
	return q
}
