package console

import (
	"context"
	"slices"
	"strings"

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

// dispatchers are the live dispatchers, idle or busy, and the lease
// holders that do not report themselves (stopped, or unable to), by owner.
func dispatchers(ctx context.Context, t *table) ([]DispatcherView, []outbox.LiveDispatcher, error) {
	live, err := t.admin.LiveDispatchers(ctx)
	if err != nil {
		return nil, nil, err
	}
	holders, err := t.admin.Dispatchers(ctx)
	if err != nil {
		return nil, nil, err
	}
	byOwner := make(map[string]*DispatcherView, len(live)+len(holders))
	for _, d := range live {
		byOwner[d.Owner] = &DispatcherView{Owner: d.Owner, Live: true, Host: d.Host, Version: d.Version, LeaseMode: d.LeaseMode,
			LastSeen: &d.LastSeen, Delivered1m: d.Delivered1m, InFlight: int64(d.InFlight), SinkPaused: d.SinkPaused}
	}
	for _, h := range holders {
		v := byOwner[h.Owner]
		if v == nil {
			v = &DispatcherView{Owner: h.Owner}
			byOwner[h.Owner] = v
		}
		v.InFlight, v.LeaseUntil, v.Expired, v.Shards = h.InFlight, &h.LeaseUntil, h.Expired, h.Shards
	}
	out := make([]DispatcherView, 0, len(byOwner))
	for _, v := range byOwner {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b DispatcherView) int { return strings.Compare(a.Owner, b.Owner) })
	return out, live, nil
}
