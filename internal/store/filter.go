package store

import (
	"fmt"
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
type where struct {
	conds []string
	args  []any
	next  int
}

func (w *where) add(term string, arg any) {
	frag, ok := terms[term]
	if !ok {
		panic("store: no filter term " + term) // a build bug
	}
	if strings.Contains(frag, "$?") {
		frag = strings.Replace(frag, "$?", "$"+strconv.Itoa(w.next), 1)
		w.args = append(w.args, arg)
		w.next++
	}
	w.conds = append(w.conds, frag)
}

func (w *where) String() string {
	if len(w.conds) == 0 {
		return "true"
	}
	return strings.Join(w.conds, " AND ")
}

// buildWhere returns the conditions of f, numbering parameters from first.
// An unknown status is an error; values never enter the text.
func buildWhere(f Filter, first int) (*where, error) {
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
		if t.set {
			w.add(t.term, t.arg)
		}
	}
	return w, nil
}
