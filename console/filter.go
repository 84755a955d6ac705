package console

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"

	"github.com/outboxd/outbox"
)

// pageKeys are the query parameters of the list pages that page a list
// rather than filter it.
var pageKeys = []string{"after", "limit", "order", "exact"}

// pageFilter reads the filter of a list page's URL: its form's empty fields
// mean "any" and its paging keys are its own; every other parameter must
// be a term of the filter grammar.
func pageFilter(q url.Values, force string) (outbox.Filter, error) {
	out := url.Values{}
	for k, vs := range q {
		if slices.Contains(pageKeys, k) {
			continue
		}
		for _, v := range vs {
			if v != "" {
				out.Add(k, v)
			}
		}
	}
	f, err := outbox.FilterFromQuery(out)
	return forced(f, err, force)
}

// queryFilter reads the filter of an API call's query string: own are the
// call's own parameters; every other one must be a term with a value.
func queryFilter(q url.Values, force string, own ...string) (outbox.Filter, error) {
	out := url.Values{}
	for k, vs := range q {
		if !slices.Contains(own, k) {
			out[k] = vs
		}
	}
	f, err := outbox.FilterFromQuery(out)
	return forced(f, err, force)
}

// forced applies a forced status to a parsed filter: the dead-letter page
// and actions are status=dead, replay status=done, and a filter may name
// only that status.
func forced(f outbox.Filter, err error, force string) (outbox.Filter, error) {
	if err != nil || force == "" {
		return f, err
	}
	for _, st := range f.Status {
		if st != force {
			return f, &outbox.FilterError{Term: "status", Err: fmt.Errorf("%q: this view and its actions cover %s messages only", st, force)}
		}
	}
	f.Status = []string{force}
	return f, nil
}

// parsePage reads keyset paging: after (an id), limit (1..500, default 50)
// and order (desc, the default, or asc).
func parsePage(q url.Values) (outbox.Page, error) {
	p := outbox.Page{Desc: q.Get("order") != "asc", Limit: 50}
	if v := q.Get("order"); v != "" && v != "asc" && v != "desc" {
		return p, errorf("order: %q is not asc or desc", v)
	}
	if v := q.Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return p, errorf("after: %q is not a message id", v)
		}
		p.After = n
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return p, errorf("limit: %q is not between 1 and 500", v)
		}
		p.Limit = n
	}
	return p, nil
}

// filterBody is a filter in a JSON request: terms of the grammar, each
// with a string, a list of strings (status and id) or a number.
type filterBody map[string]any

// values turns the body into query values for outbox.FilterFromQuery, which
// refuses unknown terms and empty values; a value of another JSON type is a
// *outbox.FilterError naming its term.
func (b filterBody) values() (url.Values, error) {
	q := url.Values{}
	for k, v := range b {
		bad := &outbox.FilterError{Term: k, Err: errors.New("want a string, a number or a list of strings")}
		switch x := v.(type) {
		case string:
			q.Add(k, x)
		case []any:
			if len(x) == 0 {
				return nil, &outbox.FilterError{Term: k, Err: errors.New("no value")}
			}
			for _, e := range x {
				s, ok := e.(string)
				if !ok {
					return nil, bad
				}
				q.Add(k, s)
			}
		case float64:
			q.Add(k, strconv.FormatFloat(x, 'f', -1, 64))
		case nil:
			return nil, &outbox.FilterError{Term: k, Err: errors.New("no value")}
		default:
			return nil, bad
		}
	}
	return q, nil
}

// bodyFilter reads a JSON request's filter, its status forced to force.
func bodyFilter(body filterBody, force string) (outbox.Filter, error) {
	q, err := body.values()
	if err != nil {
		return outbox.Filter{}, err
	}
	f, err := outbox.FilterFromQuery(q)
	return forced(f, err, force)
}
