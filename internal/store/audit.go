package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Audit is one operator write as the audit table (<table>_audit) records
// it: dead retry or skip, replay, dry runs included. The root package
// exports this type as outbox.AuditEntry.
type Audit struct {
	// At is when the write started; FinishedAt when it ended (nil while it
	// runs, or if its process died).
	At         time.Time
	FinishedAt *time.Time
	Actor      string
	// Action is dead_retry, dead_skip, replay or retry_now.
	Action string
	// Name is the replay's name; empty otherwise.
	Name string
	// Filter is the filter's terms (Filter.Terms); empty for "all".
	Filter []string
	// Count is how many messages the write moved (for a dry run, would
	// move), kept current batch by batch.
	Count  int64
	DryRun bool
}

// AuditInsert records a write. A dry run (or anything already complete) is
// recorded finished with its count; otherwise the row starts at count 0
// and each batch advances it. It returns the row's id.
func (s *Store) AuditInsert(ctx context.Context, db DB, a Audit, finished bool) (int64, error) {
	var name *string
	if a.Name != "" {
		name = &a.Name
	}
	if a.Filter == nil {
		a.Filter = []string{}
	}
	var id int64
	err := db.QueryRow(ctx, s.console.auditInsert, a.Actor, a.Action, name, a.Filter, a.Count, a.DryRun, finished).Scan(&id)
	return id, translate(err)
}

// AuditFinish marks the write recorded in row id as ended, setting its
// count unless count is nil (the batches kept it current).
func (s *Store) AuditFinish(ctx context.Context, db DB, id int64, count *int64) error {
	_, err := db.Exec(ctx, s.console.auditFinish, id, count)
	return translate(err)
}

// AuditList returns the newest limit audit rows, newest first.
func (s *Store) AuditList(ctx context.Context, db DB, limit int) ([]Audit, error) {
	rows, err := db.Query(ctx, s.console.auditList, limit)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Audit, error) {
		var a Audit
		err := row.Scan(&a.At, &a.FinishedAt, &a.Actor, &a.Action, &a.Name, &a.Filter, &a.Count, &a.DryRun)
		return a, err
	})
	return out, translate(err)
}
