package store

import (
	"context"
	"strings"
)

// Action names a bulk write, as the audit table records it.
type Action string

// The bulk writes.
const (
	ActionDeadRetry Action = "dead_retry"
	ActionDeadSkip  Action = "dead_skip"
	ActionReplay    Action = "replay"
	// ActionRetryNow makes messages waiting for a later attempt due now.
	ActionRetryNow Action = "retry_now"
)

// Batch is what one bulk batch did.
type Batch struct {
	// Cursor is the highest id the batch picked: the next batch starts after it.
	Cursor int64
	// Picked is how many rows matched and were locked; fewer than the batch
	// size means the walk reached the end.
	Picked int64
	// Moved is how many of them changed status (all of them, unless the
	// fence found one no longer in the state it was picked in).
	Moved int64
}

// BatchParams are the inputs of one bulk batch.
type BatchParams struct {
	Filter  Filter
	After   int64 // cursor: only ids above it
	Size    int
	AuditID int64
	Channel string // "schema.name", to wake the dispatchers
	Name    string // replay name (Outbox-Replay header)
}

// BulkBatch runs one batch of action: dead rows to pending or to done, or
// done rows to pending for replay, each fenced on the status it starts from,
// with the audit row's count advanced in the same statement.
func (s *Store) BulkBatch(ctx context.Context, db DB, action Action, p BatchParams) (Batch, error) {
	c, err := s.consoleFor(ctx, db)
	if err != nil {
		return Batch{}, err
	}
	q, args, err := bulkSQL(c, action, p)
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	var notified *bool
	err = db.QueryRow(ctx, q, args...).Scan(&b.Cursor, &b.Picked, &b.Moved, &notified)
	return b, translate(err)
}

// BulkSQL returns the statement BulkBatch runs, with its arguments (on a
// table without snapshot cursors).
func (s *Store) BulkSQL(action Action, p BatchParams) (string, []any, error) {
	return bulkSQL(&s.console, action, p)
}

func bulkSQL(c *consoleSQL, action Action, p BatchParams) (string, []any, error) {
	q, first := c.deadRetry, 4
	args := []any{p.Size, p.AuditID, p.Channel}
	switch action {
	case ActionDeadSkip:
		q = c.deadSkip
		args[2] = nil // skip wakes nobody: $3 is unused
	case ActionReplay:
		q, first = c.replay, 5
		args = append(args, p.Name)
	}
	w, err := buildWhere(p.Filter, first)
	if err != nil {
		return "", nil, err
	}
	if p.After > 0 {
		w.add("after", p.After)
	}
	return strings.ReplaceAll(q, "{{where}}", c.where(w.String())), append(args, w.args...), nil
}
