package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// Gauges are an outbox table's health figures that are cheap enough to read
// every few seconds however large the table grows: what the metrics package
// polls. [Admin.Status] has exact counts of every status and more, at the
// price of reading the whole table.
//
// Fields: Pending, Processing and Dead are exact row counts (read through
// the partial indexes of rows not yet done); Done is an estimate from the
// planner's statistics less those counts, never below 0 (0 while the table
// was never analysed); OldestPendingAge is the age of the oldest pending or
// processing message on the database's clock (0 when there is none);
// ExpiredLeases counts processing rows whose lease has run out.
//
// The type is the store's own: the figures are defined where they are read.
type Gauges = store.Gauges

// Gauges reads the table's gauges in one statement.
func (a *Admin) Gauges(ctx context.Context) (Gauges, error) {
	g, err := a.store.Gauges(ctx, a.db)
	if err != nil {
		return Gauges{}, fmt.Errorf("outbox: gauges: %w", err)
	}
	return g, nil
}

// DoneEstimatedAt is when the planner's row count of the table, which an
// estimated done count ([Gauges].DoneEstimated) is read from, was last set
// (the latest ANALYZE or VACUUM, manual or automatic); nil when never.
func (a *Admin) DoneEstimatedAt(ctx context.Context) (*time.Time, error) {
	at, err := a.store.AnalyzedAt(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: statistics time: %w", err)
	}
	return at, nil
}
