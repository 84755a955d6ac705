package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// AuditEntry is one operator write as the audit table (<table>_audit)
// records it: dead retry or skip, replay, dry runs included. At is when the
// write started, FinishedAt when it ended (nil while it runs, or if its
// process died); Action is dead_retry, dead_skip or replay; Name the
// replay's name; Filter the filter's terms ([Filter.Terms], empty for
// "all"); Count how many messages it moved (a dry run: would move), kept
// current batch by batch.
//
// The type is the store's own: the entry is defined where it is written.
type AuditEntry = store.Audit

// Audit actions.
const (
	AuditDeadRetry = string(store.ActionDeadRetry)
	AuditDeadSkip  = string(store.ActionDeadSkip)
	AuditReplay    = string(store.ActionReplay)
	AuditRetryNow  = string(store.ActionRetryNow)
)

// AuditLimitDefault is how many entries [Admin.AuditList] returns when
// asked for 0; it returns at most AuditLimitMax.
const (
	AuditLimitDefault = 50
	AuditLimitMax     = 1000
)

// AuditList returns the newest audit entries, newest first.
func (a *Admin) AuditList(ctx context.Context, limit int) ([]AuditEntry, error) {
	if limit <= 0 {
		limit = AuditLimitDefault
	}
	rows, err := a.store.AuditList(ctx, a.db, min(limit, AuditLimitMax))
	if err != nil {
		return nil, fmt.Errorf("outbox: audit list: %w", err)
	}
	return rows, nil
}

// SetLogger sets where the audit log lines of writes go. Defaults to
// slog.Default().
func (a *Admin) SetLogger(l *slog.Logger) { a.logger = l }

func (a *Admin) log() *slog.Logger {
	if a.logger == nil {
		return slog.Default()
	}
	return a.logger
}

// auditStart records a write about to run and returns its row id.
func (a *Admin) auditStart(ctx context.Context, e AuditEntry) (int64, error) {
	id, err := a.store.AuditInsert(ctx, a.db, e, false)
	if err != nil {
		return 0, fmt.Errorf("outbox: %s: recording the audit row: %w", label(e.Action), err)
	}
	return id, nil
}

// auditEnd closes the audit row (count nil: the batches kept it) and logs
// the write, whatever its outcome. It runs even when ctx was cancelled.
func (a *Admin) auditEnd(ctx context.Context, id int64, e AuditEntry, count *int64, opErr error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := a.store.AuditFinish(ctx, a.db, id, count)
	a.logAudit(e, opErr)
	if err != nil {
		return fmt.Errorf("outbox: %s: closing the audit row: %w", label(e.Action), err)
	}
	return nil
}

// auditDryRun records a dry run, complete.
func (a *Admin) auditDryRun(ctx context.Context, e AuditEntry) error {
	if _, err := a.store.AuditInsert(ctx, a.db, e, true); err != nil {
		return fmt.Errorf("outbox: %s: recording the audit row: %w", label(e.Action), err)
	}
	a.logAudit(e, nil)
	return nil
}

func (a *Admin) logAudit(e AuditEntry, opErr error) {
	attrs := []any{slog.String("table", a.store.Table.String()), slog.String("actor", e.Actor),
		slog.String("action", e.Action), slog.Any("filter", e.Filter), slog.Int64("count", e.Count),
		slog.Bool("dry_run", e.DryRun)}
	if e.Name != "" {
		attrs = append(attrs, slog.String("name", e.Name))
	}
	if opErr != nil {
		attrs = append(attrs, slog.String("error", opErr.Error()))
	}
	a.log().Info("outbox audit", attrs...)
}
