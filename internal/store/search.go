package store

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Found is one page of a bounded search.
type Found struct {
	Rows []Summary
	// Last is the id of the window's last row when the walk reached it (the
	// window ran out), 0 when the page filled first or the driving set
	// ended inside the window.
	Last int64
	// Read is how many rows of the window the walk read.
	Read int64
}

// SearchSQL returns the statement Search runs for f and p within a window
// of window rows, with its arguments; indexed are the columns that drive
// the walk besides status and id (IndexedColumns).
func (s *Store) SearchSQL(f Filter, p Page, window int64, indexed []string) (string, []any, error) {
	return searchSQL(&s.console, f, p, window, indexed)
}

func searchSQL(c *consoleSQL, f Filter, p Page, window int64, indexed []string) (string, []any, error) {
	w, err := buildSplit(f, 3, indexed)
	if err != nil {
		return "", nil, err
	}
	order := "ASC"
	if p.Desc {
		order = "DESC"
	}
	switch {
	case p.After > 0 && p.Desc:
		w.add("before", p.After)
	case p.After > 0:
		w.add("after", p.After)
	}
	q := strings.NewReplacer("{{driving}}", c.where(w.String()), "{{residual}}", c.where(w.Rest()), "{{order}}", order).Replace(c.search)
	return q, append([]any{p.Limit, window}, w.args...), nil
}

// Search returns the rows matching f among at most window rows of the
// driving set, from p's cursor, stopping once p.Limit rows matched.
func (s *Store) Search(ctx context.Context, db DB, f Filter, p Page, window int64, indexed []string) (Found, error) {
	c, err := s.consoleFor(ctx, db)
	if err != nil {
		return Found{}, err
	}
	q, args, err := searchSQL(c, f, p, window, indexed)
	if err != nil {
		return Found{}, err
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return Found{}, translate(err)
	}
	var out Found
	var m Summary
	var hit bool
	var n int64
	_, err = pgx.ForEachRow(rows, append(summaryDest(&m), &hit, &n), func() error {
		if hit {
			out.Rows = append(out.Rows, m)
		}
		if n == window {
			out.Last = m.ID
		}
		out.Read = max(out.Read, n)
		m = Summary{} // the next row's pointers are its own
		return nil
	})
	return out, translate(err)
}

// CountWindowSQL returns the statement CountWindow runs, with its arguments.
func (s *Store) CountWindowSQL(f Filter, window int64, indexed []string) (string, []any, error) {
	return countWindowSQL(&s.console, f, window, indexed)
}

func countWindowSQL(c *consoleSQL, f Filter, window int64, indexed []string) (string, []any, error) {
	w, err := buildSplit(f, 2, indexed)
	if err != nil {
		return "", nil, err
	}
	q := strings.NewReplacer("{{driving}}", c.where(w.String()), "{{residual}}", c.where(w.Rest())).Replace(c.countWindow)
	return q, append([]any{window}, w.args...), nil
}

// CountWindow counts the rows matching f among the newest window rows of
// the driving set; read is how many rows that window held.
func (s *Store) CountWindow(ctx context.Context, db DB, f Filter, window int64, indexed []string) (n, read int64, err error) {
	c, err := s.consoleFor(ctx, db)
	if err != nil {
		return 0, 0, err
	}
	q, args, err := countWindowSQL(c, f, window, indexed)
	if err != nil {
		return 0, 0, err
	}
	err = db.QueryRow(ctx, q, args...).Scan(&n, &read)
	return n, read, translate(err)
}

// IndexedColumns returns the columns that lead an index on (column, id).
func (s *Store) IndexedColumns(ctx context.Context, db DB) ([]string, error) {
	rows, err := db.Query(ctx, s.console.indexedColumns, s.Table.Quoted())
	if err != nil {
		return nil, translate(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return cols, translate(err)
}

// SetStatementTimeout bounds every later statement of tx's transaction to ms
// milliseconds, run without parallel workers or JIT; past it the server
// cancels the statement (SQLSTATE 57014).
func (s *Store) SetStatementTimeout(ctx context.Context, tx DB, ms int64) error {
	_, err := tx.Exec(ctx, s.console.statementTimeout, strconv.FormatInt(ms, 10))
	return translate(err)
}
