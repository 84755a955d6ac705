package console

import (
	"context"

	"github.com/outboxd/outbox"
)

func breakdownViews(rows []outbox.BreakdownRow) []BreakdownView {
	out := make([]BreakdownView, len(rows))
	for i, r := range rows {
		out[i] = BreakdownView{Key: r.Key, Pending: r.Pending, Processing: r.Processing, Dead: r.Dead}
	}
	return out
}

func breakdowns(ctx context.Context, t *table) (byEvent, byAggregate []BreakdownView, err error) {
	ev, err := t.admin.BreakdownByEventType(ctx, breakdownLimit)
	if err != nil {
		return nil, nil, err
	}
	ag, err := t.admin.BreakdownByAggregateType(ctx, breakdownLimit)
	if err != nil {
		return nil, nil, err
	}
	return breakdownViews(ev), breakdownViews(ag), nil
}

func dispatchers(ctx context.Context, t *table) ([]DispatcherView, error) {
	ds, err := t.admin.Dispatchers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]DispatcherView, len(ds))
	for i, d := range ds {
		out[i] = DispatcherView{Owner: d.Owner, InFlight: d.InFlight, LeaseUntil: d.LeaseUntil, Expired: d.Expired, Shards: d.Shards}
	}
	return out, nil
}
