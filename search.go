package outbox

import (
	"cmp"
	"context"
	"fmt"

	"github.com/outboxd/outbox/internal/store"
)

// SearchPage is one page of a bounded search ([Admin.Search]).
type SearchPage struct {
	Messages []MessageSummary
	// Next is the After of the next call: the last message of a full page,
	// or, when Partial, the last row the window searched. 0 when nothing is
	// left to search.
	Next int64
	// Partial means the window ran out before the page filled: the rows
	// past Next have not been searched yet, and the next call goes on there.
	Partial bool
	// Searched is how many rows the call read in its window; 0 when every
	// term of the filter is served by an index and no window applied.
	Searched int64
}

// Search returns one page of messages matching f, as [Admin.Messages] does,
// but never reads more than win rows (0 means SearchWindow; a tenth of it
// through a secondary index) to fill it.
// A filter whose terms an index serves (status, ids, id range, an equality
// on a column with an index on (column, id)) reads only matching rows. A
// filter with other terms (created_at, error text, paths, or a column
// without such an index) is checked row by row over at most that many rows of
// the rest of the filter, from p.After: a page that does not fill in that
// window comes back Partial, with what it found and where to go on.
func (a *Admin) Search(ctx context.Context, f Filter, p Page, win int) (SearchPage, error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return SearchPage{}, err
	}
	sf := store.Filter(f)
	indexed, err := a.indexed(ctx, sf)
	if err != nil {
		return SearchPage{}, fmt.Errorf("outbox: messages: %w", err)
	}
	if !store.Residual(sf, indexed) {
		rows, next, err := a.Messages(ctx, f, p)
		return SearchPage{Messages: rows, Next: next}, err
	}
	if p.Limit <= 0 {
		p.Limit = PageLimitDefault
	}
	p.Limit = min(p.Limit, PageLimitMax)
	w := window(sf, indexed, int64(cmp.Or(win, SearchWindow)))
	found, err := a.store.Search(ctx, a.db, sf, store.Page{After: p.After, Limit: p.Limit + 1, Desc: p.Desc}, w, indexed)
	if err != nil {
		return SearchPage{}, fmt.Errorf("outbox: messages: %w", err)
	}
	out := SearchPage{Searched: found.Read}
	rows := found.Rows
	switch {
	case len(rows) > p.Limit:
		rows = rows[:p.Limit]
		out.Next = rows[len(rows)-1].ID
	case found.Last != 0:
		out.Next, out.Partial = found.Last, true
	}
	out.Messages = make([]MessageSummary, len(rows))
	for i, r := range rows {
		out.Messages[i] = MessageSummary(r)
	}
	return out, nil
}
