package console

import (
	"context"

	"github.com/outboxd/outbox"
)

// newestID is the highest message id: one row of a backward primary-key scan.
func newestID(ctx context.Context, t *table) (int64, error) {
	rows, _, err := t.admin.Messages(ctx, outbox.Filter{}, outbox.Page{Desc: true, Limit: 1})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return rows[0].ID, nil
}
