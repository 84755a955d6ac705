package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
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
	// UID is the message's identity (the uid column), which sinks send as
	// its id; "" for a row inserted before the column was added, which is
	// sent under its numeric id.
	UID string
	// History is the message's attempt history, newest first.
	History []Attempt
}

// Attempt is one publish that did not deliver a message, as its attempt
// history records it ([Config.AttemptHistory]).
type Attempt struct {
	// At is when the publish ended, on the database's clock.
	At time.Time
	// Dispatcher is the owner of the dispatcher that made it.
	Dispatcher string
	// Attempt is the message's attempt number (a defer gives it back, so
	// deferred attempts may share one).
	Attempt  int
	Duration time.Duration
	// Outcome is OutcomeRetry, OutcomeDefer or OutcomeDead.
	Outcome Outcome
	// Status is the receiver's status code (an HTTP status), 0 when the
	// sink has none ([ResponseStatus]).
	Status int
	// Error is the error text, as last_error holds it.
	Error string
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

// SearchWindow is how many rows [Admin.Search] and a non-exact
// [Admin.Count] read at most when the filter has a term no index serves and
// the walk is the primary key's; at about a microsecond a row it bounds a
// call to tens of milliseconds at any table size. A walk through a
// secondary index (status dead, pending or processing, an indexed column)
// reads rows scattered over the table, a heap page each, and gets a tenth
// of the window.
const SearchWindow = 100_000

// scatteredShare is the part of a window a walk through a secondary index
// gets (see SearchWindow).
const scatteredShare = 10

// window is the window of a search of f: w rows, or a tenth of them when
// the walk goes through a secondary index.
func window(f store.Filter, indexed []string, w int64) int64 {
	if store.Scattered(f, indexed) {
		return max(w/scatteredShare, 1)
	}
	return w
}

// Count is a number of matching messages. Capped means counting stopped
// at N: there are N or more ("10,000+").
type Count struct {
	N      int64
	Capped bool
	// Partial means the filter has a term no index serves and counting read
	// only the Searched newest rows of the rest of the filter: N of them
	// match, more may match further back (Capped is set too).
	Partial  bool
	Searched int64
}

// Messages returns one page of messages matching f, and the After of the
// next page (0 when this is the last). It reads as far as the page needs:
// a term that matches rarely among done rows, and that no index serves,
// can read the whole table; [Admin.Search] bounds the read.
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

// Count counts the messages matching f. Unless exact, it stays fast however
// large the table: counting stops past CountCap (a Capped count of
// CountCap), and a filter with a term no index serves is counted among the
// newest SearchWindow rows only (a Partial count). Exact reads every
// matching row.
func (a *Admin) Count(ctx context.Context, f Filter, exact bool) (Count, error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return Count{}, err
	}
	if !exact {
		return a.boundedCount(ctx, f, SearchWindow)
	}
	n, err := a.store.Count(ctx, a.db, store.Filter(f), 0)
	if err != nil {
		return Count{}, fmt.Errorf("outbox: count: %w", err)
	}
	return Count{N: n}, nil
}

// CountWindow is a non-exact [Admin.Count] whose window is window rows
// rather than SearchWindow.
func (a *Admin) CountWindow(ctx context.Context, f Filter, window int) (Count, error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return Count{}, err
	}
	return a.boundedCount(ctx, f, int64(cmp.Or(window, SearchWindow)))
}

func (a *Admin) boundedCount(ctx context.Context, f Filter, w int64) (Count, error) {
	sf := store.Filter(f)
	indexed, err := a.indexed(ctx, sf)
	if err != nil {
		return Count{}, fmt.Errorf("outbox: count: %w", err)
	}
	if store.Residual(sf, indexed) {
		w = window(sf, indexed, w)
		n, read, err := a.store.CountWindow(ctx, a.db, sf, w, indexed)
		if err != nil {
			return Count{}, fmt.Errorf("outbox: count: %w", err)
		}
		if read < w {
			return Count{N: n}, nil // the window held every candidate
		}
		return Count{N: n, Capped: true, Partial: true, Searched: read}, nil
	}
	n, err := a.store.Count(ctx, a.db, sf, CountCap+1)
	if err != nil {
		return Count{}, fmt.Errorf("outbox: count: %w", err)
	}
	if n > CountCap {
		return Count{N: CountCap, Capped: true}, nil
	}
	return Count{N: n}, nil
}

// CountExactWithin is an exact [Admin.Count] bounded in time: the count
// runs with a statement timeout of d (in one backend, without JIT, so that
// it stops at d), and ok is false when the server cancelled it (then n is 0).
func (a *Admin) CountExactWithin(ctx context.Context, f Filter, d time.Duration) (n int64, ok bool, err error) {
	if err := a.CheckFilter(ctx, f); err != nil {
		return 0, false, err
	}
	err = pgx.BeginFunc(ctx, a.db, func(tx pgx.Tx) error {
		if err := a.store.SetStatementTimeout(ctx, tx, max(d.Milliseconds(), 1)); err != nil {
			return err
		}
		n, err = a.store.Count(ctx, tx, store.Filter(f), 0)
		return err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" && ctx.Err() == nil { // query_canceled
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("outbox: count: %w", err)
	}
	return n, true, nil
}

// indexed returns the columns that lead an index on (column, id), looked up
// only when f has an equality term such an index could serve.
func (a *Admin) indexed(ctx context.Context, f store.Filter) ([]string, error) {
	if f.EventType == "" && f.AggregateType == "" && f.AggregateID == "" {
		return nil, nil
	}
	return a.store.IndexedColumns(ctx, a.db)
}

// Message returns the message with id in full, or [ErrNotFound].
func (a *Admin) Message(ctx context.Context, id int64) (*MessageDetail, error) {
	// The history first: an attempt is recorded after its outcome was
	// written to the row, so the row read after it shows that outcome.
	// Read the other way round, a finalize committing between the two
	// statements showed an attempt on a row still as it was before it.
	history, err := a.Attempts(ctx, id)
	if err != nil {
		return nil, err
	}
	d, err := a.store.Message(ctx, a.db, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: message %d", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: message %d: %w", id, err)
	}
	return &MessageDetail{MessageSummary: MessageSummary(d.Summary), Payload: d.Payload,
		Headers: d.Headers, LeaseVersion: d.LeaseVersion, UID: d.UID, History: history}, nil
}

// Attempts returns message id's attempt history, newest first: empty for
// a message delivered at its first attempt, or one that does not exist.
func (a *Admin) Attempts(ctx context.Context, id int64) ([]Attempt, error) {
	entries, err := a.store.Attempts(ctx, a.db, id, maxAttemptHistory)
	if err != nil {
		return nil, fmt.Errorf("outbox: attempt history of message %d: %w", id, err)
	}
	out := make([]Attempt, len(entries))
	for i, e := range entries {
		out[i] = Attempt{At: e.At, Dispatcher: e.Dispatcher, Attempt: e.Attempt, Duration: e.Duration,
			Outcome: Outcome(e.Outcome), Status: e.Status, Error: e.Error}
	}
	return out, nil
}

// CheckFilter has the database parse f's paths, so a bad one is one
// [*FilterError] before any statement that uses it runs.
func (a *Admin) CheckFilter(ctx context.Context, f Filter) error {
	for _, p := range []struct{ term, path string }{{"payload", f.PayloadPath}, {"header", f.HeaderPath}} {
		if p.path == "" {
			continue
		}
		err := a.store.CheckPath(ctx, a.db, p.path)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && (pgErr.Code == "42601" || pgErr.Code == "22P02" || pgErr.Code == "2201B"):
			// syntax_error, invalid_text_representation,
			// invalid_regular_expression (a like_regex): the path itself.
			return &FilterError{Term: p.term, Err: fmt.Errorf("%q: %s", p.path, pgErr.Message)}
		case err != nil:
			return fmt.Errorf("outbox: checking %s path: %w", p.term, err)
		}
	}
	for _, s := range f.Status {
		if !slices.Contains(statuses, s) {
			return &FilterError{Term: "status", Err: fmt.Errorf("unknown status %q (want pending, processing, done or dead)", s)}
		}
	}
	return nil
}
