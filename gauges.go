package outbox

import (
	"context"
	"fmt"
	"time"
)

// Gauges are an outbox table's health figures that are cheap enough to read
// every few seconds however large the table grows: what the metrics package
// polls. [Admin.Status] has exact counts of every status and more, at the
// price of reading the whole table.
type Gauges struct {
	// Pending, Processing and Dead are exact row counts, read through the
	// partial indexes that hold only rows not yet done.
	Pending, Processing, Dead int64
	// Done is an estimate: the planner's row count of the table (as of its
	// last ANALYZE or VACUUM) less the exact counts, never below 0. It is 0
	// while the table has never been analysed.
	Done int64
	// OldestPendingAge is the age of the oldest pending or processing
	// message, on the database's clock; 0 when there is none.
	OldestPendingAge time.Duration
	// ExpiredLeases counts processing rows whose lease has run out (crashed
	// or stalled workers).
	ExpiredLeases int64
}

// Gauges reads the table's gauges in one statement.
func (a *Admin) Gauges(ctx context.Context) (Gauges, error) {
	g, err := a.store.Gauges(ctx, a.db)
	if err != nil {
		return Gauges{}, fmt.Errorf("outbox: gauges: %w", err)
	}
	return Gauges(g), nil
}
