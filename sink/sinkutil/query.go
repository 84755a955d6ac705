package sinkutil

import (
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// QuerySpec declares the query parameters a sink URL accepts. Every sink's
// parser reads its query through one, so the errors for a repeated, unknown
// or ill-formed parameter read the same whichever sink reports them.
type QuerySpec struct {
	// Known lists every accepted parameter.
	Known []string
	// Repeatable lists the parameters that may be given more than once;
	// any other is an error when repeated.
	Repeatable []string
}

// Query is a parsed sink URL query whose keys are all known and, but for
// the repeatable ones, given once. Its errors carry no package prefix (the
// sink adds its own) and never quote the value of a secret parameter.
type Query struct {
	v url.Values
}

// Parse parses rawQuery, the query part of rawURL (rawURL only serves to
// keep its secrets out of errors). An unknown key is answered with the list
// of known ones.
func (s QuerySpec) Parse(rawQuery, rawURL string) (Query, error) {
	v, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Query{}, fmt.Errorf("malformed URL query: %s", Scrub(err.Error(), rawURL))
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad key is the same on every run
	for _, k := range keys {
		if !slices.Contains(s.Known, k) {
			known := slices.Clone(s.Known)
			slices.Sort(known)
			return Query{}, fmt.Errorf("unknown URL parameter %q (known: %s)", k, strings.Join(known, ", "))
		}
		if n := len(v[k]); n > 1 && !slices.Contains(s.Repeatable, k) {
			return Query{}, fmt.Errorf("URL parameter %s given %d times; give it once", k, n)
		}
	}
	return Query{v: v}, nil
}

// Read parses rawQuery as [QuerySpec.Parse] does and hands the query to
// read, which takes the sink's parameters from it.
func (s QuerySpec) Read(rawQuery, rawURL string, read func(Query) error) error {
	q, err := s.Parse(rawQuery, rawURL)
	if err != nil {
		return err
	}
	return read(q)
}

// Has reports whether key is in the query.
func (q Query) Has(key string) bool { return q.v.Has(key) }

// Values returns the parameters named by keys that are present, with all
// their values (for handing on to a client library).
func (q Query) Values(keys ...string) url.Values {
	out := url.Values{}
	for _, k := range keys {
		if vs, ok := q.v[k]; ok {
			out[k] = vs
		}
	}
	return out
}

// String returns key's value, or def when key is absent.
func (q Query) String(key, def string) string {
	if !q.v.Has(key) {
		return def
	}
	return q.v.Get(key)
}

// NonEmpty is [Query.String] refusing an empty value.
func (q Query) NonEmpty(key, def string) (string, error) {
	s := q.String(key, def)
	if s == "" {
		return "", fmt.Errorf("%s must not be empty", key)
	}
	return s, nil
}

// Bool returns key's value as a boolean, or def when key is absent: on and
// off, and whatever [strconv.ParseBool] takes (true, false, 1, 0, ...).
func (q Query) Bool(key string, def bool) (bool, error) {
	if !q.v.Has(key) {
		return def, nil
	}
	switch v := q.v.Get(key); strings.ToLower(v) {
	case "on":
		return true, nil
	case "off":
		return false, nil
	default:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, q.bad(key, "true or false (on or off)")
		}
		return b, nil
	}
}

// Positive as the lower bound of [Query.Duration] means greater than zero.
const Positive = time.Nanosecond

// Duration returns key's value as a Go duration (5s, 250ms), or def when key
// is absent. The value must be at least minimum and, when maximum is
// positive, at most maximum.
func (q Query) Duration(key string, def, minimum, maximum time.Duration) (time.Duration, error) {
	if !q.v.Has(key) {
		return def, nil
	}
	d, err := time.ParseDuration(q.v.Get(key))
	if err != nil || d < minimum || (maximum > 0 && d > maximum) {
		return 0, q.bad(key, durationWant(minimum, maximum))
	}
	return d, nil
}

func durationWant(minimum, maximum time.Duration) string {
	switch {
	case minimum == Positive && maximum > 0:
		return "a positive duration of at most " + maximum.String()
	case minimum == Positive:
		return "a positive duration such as 5s"
	case maximum > 0:
		return fmt.Sprintf("a duration from %s to %s", minimum, maximum)
	default:
		return fmt.Sprintf("a duration of at least %s (such as 5s)", minimum)
	}
}

// Int returns key's value as an integer, or def when key is absent. The
// value must be at least minimum and, when maximum is positive, at most
// maximum.
func (q Query) Int(key string, def, minimum, maximum int) (int, error) {
	return q.IntOf(key, "", def, minimum, maximum)
}

// IntOf is [Query.Int] for a count of unit (such as "seconds"), which the
// error names.
func (q Query) IntOf(key, unit string, def, minimum, maximum int) (int, error) {
	if !q.v.Has(key) {
		return def, nil
	}
	n, err := strconv.Atoi(q.v.Get(key))
	if err != nil || n < minimum || (maximum > 0 && n > maximum) {
		want := "an integer"
		if unit != "" {
			want = "a whole number of " + unit
		}
		if maximum > 0 {
			want += fmt.Sprintf(" from %d to %d", minimum, maximum)
		} else {
			want += fmt.Sprintf(" of at least %d", minimum)
		}
		return 0, q.bad(key, want)
	}
	return n, nil
}

// OneOf returns key's value, which must be one of allowed, or def when key
// is absent.
func (q Query) OneOf(key, def string, allowed ...string) (string, error) {
	v := q.String(key, def)
	if !slices.Contains(allowed, v) {
		return "", q.bad(key, "one of "+strings.Join(allowed, ", "))
	}
	return v, nil
}

// bad is the error for a value of key that is not what it should be; the
// value of a secret parameter is not quoted.
func (q Query) bad(key, want string) error {
	v := q.v.Get(key)
	if IsSecretKey(key) {
		v = Redacted
	}
	return fmt.Errorf("%s must be %s, got %q", key, want, v)
}

// Prepare begins a sink's New: it parses rawURL with parse and returns the
// result with opts, a nil opts replaced by the zero options (all defaults).
func Prepare[C, O any](rawURL string, opts *O, parse func(string) (C, error)) (C, *O, error) {
	if opts == nil {
		opts = new(O)
	}
	c, err := parse(rawURL)
	return c, opts, err
}

// ParseError is what a sink's CheckURL returns: the error parse gives for
// rawURL, the parsed value dropped.
func ParseError[C any](rawURL string, parse func(string) (C, error)) error {
	_, err := parse(rawURL)
	return err
}

// Logger returns l, or a logger discarding everything when l is nil.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}
