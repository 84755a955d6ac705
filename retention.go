package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/service"
)

// Retention is [Admin.RunRetention] as a background service with the
// dispatcher's lifecycle: Start launches it, Stop ends it and waits.
type Retention struct {
	admin     *Admin
	olderThan time.Duration
	every     time.Duration
	logger    *slog.Logger
	runner    service.Runner
}

// Retention returns a service that deletes done messages older than
// olderThan every interval (see [Admin.RunRetention]).
func (a *Admin) Retention(olderThan, every time.Duration, logger *slog.Logger) *Retention {
	return &Retention{admin: a, olderThan: olderThan, every: every, logger: logger}
}

// Start runs the purges in the background until Stop or until ctx ends.
func (r *Retention) Start(ctx context.Context) error {
	err := r.runner.Start(ctx, func(ctx context.Context) error {
		r.admin.RunRetention(ctx, r.olderThan, r.every, r.logger)
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: retention %w", err)
	}
	return nil
}

// Stop ends the purges and waits for the one running. It is safe to call
// more than once, and before Start.
func (r *Retention) Stop() error { return r.runner.Stop() }
