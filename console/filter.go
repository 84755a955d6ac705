package console

import (
	"net/url"
	"strconv"

	"github.com/outboxd/outbox"
)

// pagingKeys are the query parameters that page a list rather than filter it.
var pagingKeys = []string{"after", "limit", "order", "exact", "table"}

// filterQuery returns the filter parameters of q (paging keys and empty
// values removed), so that an empty field in a submitted form means "any".
func filterQuery(q url.Values) url.Values {
	out := url.Values{}
	for k, vs := range q {
		if isPagingKey(k) {
			continue
		}
		for _, v := range vs {
			if v != "" {
				out.Add(k, v)
			}
		}
	}
	return out
}

func isPagingKey(k string) bool {
	for _, p := range pagingKeys {
		if k == p {
			return true
		}
	}
	return false
}

// parseFilter reads a filter from query parameters. A forced status (the
// dead-letter page and actions are status=dead, replay status=done) replaces
// the status asked for, which may only be that one.
func parseFilter(q url.Values, force string) (outbox.Filter, error) {
	f, err := outbox.FilterFromQuery(filterQuery(q))
	if err != nil || force == "" {
		return f, err
	}
	for _, st := range f.Status {
		if st != force {
			return f, errorf("status=%s: this view and its actions cover %s messages only", st, force)
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

// filterBody is a filter in a JSON request: the query parameter keys, each
// with a string or a list of strings.
type filterBody map[string]any

func (b filterBody) values() (url.Values, error) {
	q := url.Values{}
	for k, v := range b {
		switch x := v.(type) {
		case string:
			q.Add(k, x)
		case []any:
			for _, e := range x {
				s, ok := e.(string)
				if !ok {
					return nil, errorf("filter.%s: want a string or a list of strings", k)
				}
				q.Add(k, s)
			}
		case float64:
			q.Add(k, strconv.FormatFloat(x, 'f', -1, 64))
		default:
			return nil, errorf("filter.%s: want a string or a list of strings", k)
		}
	}
	return q, nil
}
