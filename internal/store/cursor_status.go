package store

import (
	"context"
	"encoding/json"
	"strconv"
	"time"
)

// cursorFigures are the health figures of a table under snapshot cursors
// (sql/cursor_status.sql), where pending, done and dead derive from the
// cursors and the parked table, not from the status column.
type cursorFigures struct {
	pending, dead, done int64
	doneEstimated       bool
	// oldest is the oldest pending message's age, -1 when none is.
	oldest   time.Duration
	attempts map[int]int64
}

// cursorFigures reads the figures of a table with snapshot cursors.
func (s *Store) cursorFigures(ctx context.Context, db DB) (f cursorFigures, err error) {
	var age *float64
	var hist []byte
	var estimate, capped int64
	err = db.QueryRow(ctx, s.cursor.status, s.Table.ident("")).Scan(&f.pending, &f.dead, &age, &hist, &estimate, &capped)
	if err != nil {
		return f, translate(err)
	}
	f.oldest = -1
	if age != nil {
		f.oldest = time.Duration(*age * float64(time.Second))
	}
	// As status.sql: past 10,000 the planner's row count less the exact
	// counts, an estimate; below it, the rows counted.
	if rest := estimate - f.pending - f.dead; rest > 10000 || capped > 10000 {
		f.done, f.doneEstimated = max(rest, capped-f.pending-f.dead), true
	} else {
		f.done = max(capped-f.pending-f.dead, 0)
	}
	var h map[string]int64
	if err := json.Unmarshal(hist, &h); err != nil {
		return f, err
	}
	f.attempts = make(map[int]int64, len(h))
	for k, v := range h {
		n, err := strconv.Atoi(k)
		if err != nil {
			return f, err
		}
		f.attempts[n] = v
	}
	return f, nil
}
