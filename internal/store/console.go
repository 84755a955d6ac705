package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotFound reports that no row has the id asked for.
var ErrNotFound = errors.New("message not found")

// Summary is a row without its payload and headers: a list entry.
type Summary struct {
	ID                                            int64
	AggregateType, AggregateID, EventType, Status string
	Attempts                                      int
	CreatedAt, AvailableAt                        time.Time
	DoneAt, LeaseUntil                            *time.Time
	LeaseOwner, LastError                         *string
}

// Detail is a row in full.
type Detail struct {
	Summary
	Payload      json.RawMessage
	Headers      map[string]string
	LeaseVersion int64
	// UID is the message's identity ("" for a row from before it had one).
	UID string
}

// Page is one keyset page request.
type Page struct {
	After int64
	Limit int
	Desc  bool
}

// consoleSQL are the statements whose WHERE clause is built per filter.
type consoleSQL struct {
	messages, count, countExact, message, checkPath string
	search, countWindow, indexedColumns             string
	statementTimeout                                string
	deadRetry, deadSkip, replay                     string
	auditInsert, auditFinish, auditList             string
	breakdownEvent, breakdownAggregate, owners      string
	maxID                                           string
	// terms rewrites filter terms for the rows read (nil: as written).
	terms *strings.Replacer
}

// where is a WHERE clause's text as c reads it.
func (c *consoleSQL) where(text string) string {
	if c.terms == nil {
		return text
	}
	return c.terms.Replace(text)
}

// loadConsole loads the console's statements. Those that read rows read
// them from rows: the table, or under snapshot cursors the derived
// relation of sql/cursor_console_rows.sql. It goes in before the names do
// (r): a name may contain "{{rows}}" itself.
func loadConsole(r *strings.Replacer, rows string) consoleSQL {
	load := func(name string) string { return r.Replace(rawSQL(name)) }
	read := func(name string) string { return readRows(r, rows, name) }
	breakdown := read("sql/breakdown.sql")
	return consoleSQL{
		messages:           read("sql/console_messages.sql"),
		count:              read("sql/console_count.sql"),
		countExact:         read("sql/console_count_exact.sql"),
		search:             read("sql/console_search.sql"),
		countWindow:        read("sql/console_count_window.sql"),
		indexedColumns:     load("sql/indexed_columns.sql"),
		statementTimeout:   load("sql/statement_timeout.sql"),
		message:            read("sql/console_message.sql"),
		checkPath:          load("sql/check_path.sql"),
		deadRetry:          load("sql/dead_retry_batch.sql"),
		deadSkip:           load("sql/dead_skip_batch.sql"),
		replay:             load("sql/replay_batch.sql"),
		auditInsert:        load("sql/audit_insert.sql"),
		auditFinish:        load("sql/audit_finish.sql"),
		auditList:          load("sql/audit_list.sql"),
		breakdownEvent:     strings.ReplaceAll(breakdown, "{{key}}", "event_type"),
		breakdownAggregate: strings.ReplaceAll(breakdown, "{{key}}", "aggregate_type"),
		owners:             load("sql/dispatchers.sql"),
		maxID:              load("sql/max_id.sql"),
	}
}

// readRows is the statement name reading rows ({{rows}}), with the names
// in.
func readRows(r *strings.Replacer, rows, name string) string {
	return r.Replace(strings.ReplaceAll(rawSQL(name), "{{rows}}", rows))
}

// MaxID returns the highest id in the table (0 when it is empty) and the
// database's clock.
func (s *Store) MaxID(ctx context.Context, db DB) (int64, time.Time, error) {
	var id int64
	var at time.Time
	err := db.QueryRow(ctx, s.console.maxID).Scan(&id, &at)
	return id, at, translate(err)
}

// consoleFor is the console's statements for the table as it is: over the
// derived relation of its rows under snapshot cursors, else the table.
func (s *Store) consoleFor(ctx context.Context, db DB) (*consoleSQL, error) {
	shape, err := s.shape(ctx, db)
	if err != nil {
		return nil, err
	}
	if shape.cursors {
		return &s.cursorConsole, nil
	}
	return &s.console, nil
}

// MessagesSQL returns the statement Messages runs for f and p, with its
// arguments (on a table without snapshot cursors).
func (s *Store) MessagesSQL(f Filter, p Page) (string, []any, error) {
	return messagesSQL(&s.console, f, p)
}

func messagesSQL(c *consoleSQL, f Filter, p Page) (string, []any, error) {
	w, err := buildWhere(f, 2)
	if err != nil {
		return "", nil, err
	}
	order := "ASC"
	if p.Desc {
		order = "DESC"
	}
	if p.After > 0 {
		if p.Desc {
			w.add("before", p.After)
		} else {
			w.add("after", p.After)
		}
	}
	q := strings.NewReplacer("{{where}}", c.where(w.String()), "{{order}}", order).Replace(c.messages)
	return q, append([]any{p.Limit}, w.args...), nil
}

// Messages returns one page of rows matching f.
func (s *Store) Messages(ctx context.Context, db DB, f Filter, p Page) ([]Summary, error) {
	c, err := s.consoleFor(ctx, db)
	if err != nil {
		return nil, err
	}
	q, args, err := messagesSQL(c, f, p)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Summary, error) {
		var m Summary
		err := row.Scan(summaryDest(&m)...)
		return m, err
	})
	return out, translate(err)
}

func summaryDest(m *Summary) []any {
	return []any{&m.ID, &m.AggregateType, &m.AggregateID, &m.EventType, &m.Status, &m.Attempts,
		&m.CreatedAt, &m.AvailableAt, &m.DoneAt, &m.LeaseUntil, &m.LeaseOwner, &m.LastError}
}

// CountSQL returns the statement Count runs for f, with its arguments; cap
// 0 means exact (on a table without snapshot cursors).
func (s *Store) CountSQL(f Filter, limit int64) (string, []any, error) {
	return countSQL(&s.console, f, limit)
}

func countSQL(c *consoleSQL, f Filter, limit int64) (string, []any, error) {
	first, q := 2, c.count
	if limit == 0 {
		first, q = 1, c.countExact
	}
	w, err := buildWhere(f, first)
	if err != nil {
		return "", nil, err
	}
	q = strings.ReplaceAll(q, "{{where}}", c.where(w.String()))
	if limit == 0 {
		return q, w.args, nil
	}
	return q, append([]any{limit}, w.args...), nil
}

// Count counts rows matching f, stopping at limit (0: count them all).
func (s *Store) Count(ctx context.Context, db DB, f Filter, limit int64) (int64, error) {
	c, err := s.consoleFor(ctx, db)
	if err != nil {
		return 0, err
	}
	q, args, err := countSQL(c, f, limit)
	if err != nil {
		return 0, err
	}
	var n int64
	err = db.QueryRow(ctx, q, args...).Scan(&n)
	return n, translate(err)
}

// Message returns the row with id, or ErrNotFound.
func (s *Store) Message(ctx context.Context, db DB, id int64) (*Detail, error) {
	var d Detail
	var payload string
	var headers, uid *string
	dest := append(summaryDest(&d.Summary), &payload, &headers, &d.LeaseVersion, &uid)
	c, err := s.consoleFor(ctx, db)
	if err != nil {
		return nil, err
	}
	err = db.QueryRow(ctx, c.message, id).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, translate(err)
	}
	d.Payload = json.RawMessage(payload)
	if uid != nil {
		d.UID = *uid
	}
	d.Headers = map[string]string{}
	if headers != nil {
		// JSON null reads as nil; what is not an object stays empty.
		if h, err := decodeHeaders(*headers); err == nil {
			d.Headers = h
		}
	}
	return &d, nil
}

// CheckPath reports whether path parses as an SQL/JSON path; the error is
// PostgreSQL's own message.
func (s *Store) CheckPath(ctx context.Context, db DB, path string) error {
	var ok bool
	return db.QueryRow(ctx, s.console.checkPath, path).Scan(&ok)
}

// cursorConsole is the console's statements for a table under snapshot
// cursors: over the derived relation of its rows, the dead ones looked up
// by id from the parked table (the derived status serves no index, and a
// filter on it alone would walk the whole table).
func cursorConsole(r *strings.Replacer) consoleSQL {
	rows := strings.TrimSpace(stripComments(rawSQL("sql/cursor_console_rows.sql")))
	c := loadConsole(r, rows)
	c.terms = strings.NewReplacer(terms["status_dead"], r.Replace(terms["cursor_status_dead"]))
	// The bulk writes pick from the rows as the console reads them, and
	// write the parked table (replay: and the row's headers).
	c.deadRetry = readRows(r, rows, "sql/cursor_dead_retry_batch.sql")
	c.deadSkip = readRows(r, rows, "sql/cursor_dead_skip_batch.sql")
	c.replay = readRows(r, rows, "sql/cursor_replay_batch.sql")
	breakdown := withFragments(rawSQL("sql/cursor_breakdown.sql"))
	c.breakdownEvent = r.Replace(strings.ReplaceAll(breakdown, "{{key}}", "event_type"))
	c.breakdownAggregate = r.Replace(strings.ReplaceAll(breakdown, "{{key}}", "aggregate_type"))
	return c
}
