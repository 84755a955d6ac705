package store

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Filter selects rows; zero fields match everything. It mirrors
// outbox.Filter field for field.
type Filter struct {
	Status        []string
	EventType     string
	AggregateType string
	AggregateID   string
	IDs           []int64
	IDMin, IDMax  int64
	CreatedAfter  time.Time
	CreatedBefore time.Time
	ErrorContains string
	PayloadPath   string
	HeaderPath    string
}

// terms are the fragments of sql/filter.sql by name.
var terms = loadTerms()

func loadTerms() map[string]string {
	b, err := files.ReadFile("sql/filter.sql")
	if err != nil {
		panic(err) // embedded at build time
	}
	out := map[string]string{}
	name := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "-- term: "):
			name = strings.TrimPrefix(line, "-- term: ")
		case line == "" || strings.HasPrefix(line, "--"):
		case name != "":
			out[name] = strings.TrimSpace(out[name] + " " + line)
		}
	}
	return out
}

// where is a WHERE clause being built from filter.sql's fragments: the
// conditions, their parameters' values, and the next parameter's number.
//
// A split clause (buildSplit) keeps apart the residual conditions: those no
// index serves, checked row by row in a bounded window.
type where struct {
	conds, rest []string
	args        []any
	next        int
}

func (w *where) add(term string, arg any) { w.conds = append(w.conds, w.frag(term, arg)) }

// addRest adds a residual condition.
func (w *where) addRest(term string, arg any) { w.rest = append(w.rest, w.frag(term, arg)) }

func (w *where) frag(term string, arg any) string {
	frag, ok := terms[term]
	if !ok {
		panic("store: no filter term " + term) // a build bug
	}
	if strings.Contains(frag, "$?") {
		frag = strings.Replace(frag, "$?", "$"+strconv.Itoa(w.next), 1)
		w.args = append(w.args, arg)
		w.next++
	}
	return frag
}

func (w *where) String() string { return joinAnd(w.conds) }

// Rest is the residual conditions, ANDed.
func (w *where) Rest() string { return joinAnd(w.rest) }

func joinAnd(conds []string) string {
	if len(conds) == 0 {
		return "true"
	}
	return strings.Join(conds, " AND ")
}

// Scattered reports whether the walk that drives a search of f goes through
// a secondary index (a status other than done, or an indexed column): its
// rows lie anywhere in the table, about a heap page each, where the primary
// key's neighbours share pages.
func Scattered(f Filter, indexed []string) bool {
	if len(f.Status) > 1 || len(f.Status) == 1 && f.Status[0] != "done" {
		return true
	}
	for _, t := range []struct {
		col, value string
	}{{"event_type", f.EventType}, {"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID}} {
		if t.value != "" && slices.Contains(indexed, t.col) {
			return true
		}
	}
	return false
}

// Residual reports whether f has a term that no index of the table serves,
// given the columns that lead an index on (column, id) (IndexedColumns).
func Residual(f Filter, indexed []string) bool {
	w, err := buildSplit(f, 1, indexed)
	return err == nil && len(w.rest) > 0
}

// buildWhere returns the conditions of f, numbering parameters from first.
// An unknown status is an error; values never enter the text.
func buildWhere(f Filter, first int) (*where, error) { return build(f, first, nil) }

// buildSplit is buildWhere with the terms no index serves kept apart: the
// status, id and cursor terms drive the walk, and so do equality terms on
// the indexed columns; the rest are residual.
func buildSplit(f Filter, first int, indexed []string) (*where, error) {
	residual := map[string]bool{"created_after": true, "created_before": true,
		"error_contains": true, "payload_path": true, "header_path": true}
	for _, col := range []string{"event_type", "aggregate_type", "aggregate_id"} {
		residual[col] = !slices.Contains(indexed, col)
	}
	return build(f, first, residual)
}

// build returns the conditions of f, numbering parameters from first; the
// terms in residual go to the residual conditions.
func build(f Filter, first int, residual map[string]bool) (*where, error) {
	w := &where{next: first}
	if len(f.Status) > 0 {
		var alts []string
		for _, s := range f.Status {
			frag, ok := terms["status_"+s]
			if !ok {
				return nil, fmt.Errorf("unknown status %q", s)
			}
			alts = append(alts, frag)
		}
		if len(alts) == 1 {
			w.conds = append(w.conds, alts[0])
		} else {
			w.conds = append(w.conds, "("+strings.Join(alts, " OR ")+")")
		}
	}
	for _, t := range []struct {
		term string
		set  bool
		arg  any
	}{
		{"event_type", f.EventType != "", f.EventType},
		{"aggregate_type", f.AggregateType != "", f.AggregateType},
		{"aggregate_id", f.AggregateID != "", f.AggregateID},
		{"ids", len(f.IDs) > 0, f.IDs},
		{"id_min", f.IDMin != 0, f.IDMin},
		{"id_max", f.IDMax != 0, f.IDMax},
		{"created_after", !f.CreatedAfter.IsZero(), f.CreatedAfter},
		{"created_before", !f.CreatedBefore.IsZero(), f.CreatedBefore},
		{"error_contains", f.ErrorContains != "", f.ErrorContains},
		{"payload_path", f.PayloadPath != "", f.PayloadPath},
		{"header_path", f.HeaderPath != "", f.HeaderPath},
	} {
		switch {
		case t.set && residual[t.term]:
			w.addRest(t.term, t.arg)
		case t.set:
			w.add(t.term, t.arg)
		}
	}
	return w, nil
}
