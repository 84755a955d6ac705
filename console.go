package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outbox/internal/store"
)

// MessageSummary is a message without its payload and headers: one line
// of a list.
type MessageSummary struct {
	ID                                            int64
	AggregateType, AggregateID, EventType, Status string
	Attempts                                      int
	CreatedAt, AvailableAt                        time.Time
	// DoneAt is when the message was delivered (or skipped); nil otherwise.
	DoneAt *time.Time
	// LeaseUntil and LeaseOwner are set while the message is processing.
	LeaseUntil *time.Time
	LeaseOwner *string
	LastError  *string
}

// MessageDetail is a message in full.
type MessageDetail struct {
	MessageSummary
	Payload json.RawMessage
	Headers map[string]string
	// LeaseVersion is the fencing token: it grows by one at every claim.
	LeaseVersion int64
}

// Page is one keyset page: rows with id < After when Desc (newest first),
// id > After otherwise; After 0 starts at the newest (or oldest) row.
type Page struct {
	After int64
	// Limit is the page size. Defaults to PageLimitDefault; at most
	// PageLimitMax.
	Limit int
	Desc  bool
}

// Page sizes.
const (
	PageLimitDefault = 50
	PageLimitMax     = 500
)

// CountCap is where a non-exact [Admin.Count] stops counting.
const CountCap = 10_000

// Count is a number of matching messages. Capped means counting stopped
// at N: there are N or more ("10,000+").
type Count struct {
	N      int64
	Capped bool
}

// Messages returns one page of messages matching f, and the After of the
// next page (0 when this is the last).
func (a *Admin) Messages(ctx context.Context, f Filter, p Page) ([]MessageSummary, int64, error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return nil, 0, err
	}
	if p.Limit <= 0 {
		p.Limit = PageLimitDefault
	}
	p.Limit = min(p.Limit, PageLimitMax)
	// One row more than the page says whether another page follows.
	rows, err := a.store.Messages(ctx, a.db, store.Filter(f), store.Page{After: p.After, Limit: p.Limit + 1, Desc: p.Desc})
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: messages: %w", err)
	}
	var next int64
	if len(rows) > p.Limit {
		rows = rows[:p.Limit]
		next = rows[len(rows)-1].ID
	}
	out := make([]MessageSummary, len(rows))
	for i, r := range rows {
		out[i] = MessageSummary(r)
	}
	return out, next, nil
}

// Count counts the messages matching f. Unless exact, counting stops past
// CountCap, so the answer stays fast however large the table: a Capped
// count of CountCap. Exact reads every matching row.
func (a *Admin) Count(ctx context.Context, f Filter, exact bool) (Count, error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return Count{}, err
	}
	var limit int64
	if !exact {
		limit = CountCap + 1
	}
	n, err := a.store.Count(ctx, a.db, store.Filter(f), limit)
	if err != nil {
		return Count{}, fmt.Errorf("outbox: count: %w", err)
	}
	if !exact && n > CountCap {
		return Count{N: CountCap, Capped: true}, nil
	}
	return Count{N: n}, nil
}

// Message returns the message with id in full, or [ErrNotFound].
func (a *Admin) Message(ctx context.Context, id int64) (*MessageDetail, error) {
	d, err := a.store.Message(ctx, a.db, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: message %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: message %d: %w", id, err)
	}
	return &MessageDetail{MessageSummary: MessageSummary(d.Summary), Payload: d.Payload,
		Headers: d.Headers, LeaseVersion: d.LeaseVersion}, nil
}

// CheckFilter has the database parse f's paths, so a bad one is one
// [*FilterError] before any statement that uses it runs.
func (a *Admin) CheckFilter(ctx context.Context, f Filter) error {
	for _, p := range []struct{ term, path string }{{"payload=", f.PayloadPath}, {"header=", f.HeaderPath}} {
		if p.path == "" {
			continue
		}
		err := a.store.CheckPath(ctx, a.db, p.path)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && (pgErr.Code == "42601" || pgErr.Code == "22P02"):
			// syntax_error, invalid_text_representation: the path itself.
			return &FilterError{Term: p.term + p.path, Err: errors.New(pgErr.Message)}
		case err != nil:
			return fmt.Errorf("outbox: checking %s path: %w", p.term, err)
		}
	}
	for _, s := range f.Status {
		if !slices.Contains(statuses, s) {
			return &FilterError{Term: "status=" + s, Err: errors.New("unknown status (want pending, processing, done or dead)")}
		}
	}
	return nil
}
