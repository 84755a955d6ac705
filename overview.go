package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// BreakdownRow counts the messages not done of one event type or aggregate
// type.
type BreakdownRow struct {
	Key                       string
	Pending, Processing, Dead int64
}

// BreakdownLimitDefault is how many groups a breakdown returns when asked
// for 0; BreakdownLimitMax is the most it returns.
const (
	BreakdownLimitDefault = 20
	BreakdownLimitMax     = 1000
)

// BreakdownByEventType counts pending, processing and dead messages by
// event type, the largest groups first. It reads only rows not done (a
// partial index), so it stays cheap however many are done.
func (a *Admin) BreakdownByEventType(ctx context.Context, limit int) ([]BreakdownRow, error) {
	return a.breakdown(ctx, "event_type", limit)
}

// BreakdownByAggregateType is [Admin.BreakdownByEventType] by aggregate type.
func (a *Admin) BreakdownByAggregateType(ctx context.Context, limit int) ([]BreakdownRow, error) {
	return a.breakdown(ctx, "aggregate_type", limit)
}

func (a *Admin) breakdown(ctx context.Context, column string, limit int) ([]BreakdownRow, error) {
	if limit <= 0 {
		limit = BreakdownLimitDefault
	}
	rows, err := a.store.BreakdownBy(ctx, a.db, column, min(limit, BreakdownLimitMax))
	if err != nil {
		return nil, fmt.Errorf("outbox: breakdown by %s: %w", column, err)
	}
	out := make([]BreakdownRow, len(rows))
	for i, r := range rows {
		out[i] = BreakdownRow(r)
	}
	return out, nil
}

// DispatcherInfo is a dispatcher (lease owner) holding leases.
type DispatcherInfo struct {
	Owner string
	// InFlight is how many messages it holds leased.
	InFlight int64
	// LeaseUntil is its latest lease expiry: every claim and heartbeat moves
	// it to now() + lease, so it is the freshest sign of life. Claim times
	// are not recorded.
	LeaseUntil time.Time
	// Expired counts its leases that have run out (a crashed or stalled
	// dispatcher); others re-claim them.
	Expired int64
	// Shards are the shards it holds, under shard leases (nil under row
	// leases). Its InFlight is then what it reported at its last renewal
	// (no claim is written) and its leases are those of its shards.
	Shards []int
}

// Dispatchers returns the owners holding leases, by name, from the
// processing rows alone (a partial index), then the shard-lease
// dispatchers holding shards. A dispatcher holding none is not listed.
func (a *Admin) Dispatchers(ctx context.Context) ([]DispatcherInfo, error) {
	rows, err := a.store.Owners(ctx, a.db)
	if err != nil {
		return nil, fmt.Errorf("outbox: dispatchers: %w", err)
	}
	out := make([]DispatcherInfo, len(rows))
	for i, r := range rows {
		out[i] = DispatcherInfo(r)
	}
	return out, nil
}

// Blocked is what waits behind dead messages when each aggregate is
// delivered in order (Config.Ordered, shard leases): the aggregates whose
// oldest unfinished message is dead and that have pending messages behind
// it, which only an operator unblocks (retry or skip the dead head).
type Blocked struct {
	Aggregates int64              `json:"aggregates"`
	Messages   int64              `json:"messages"`
	List       []BlockedAggregate `json:"list"`
}

// BlockedAggregate is one aggregate waiting behind its dead head: the
// dead message's id and how many pending messages wait behind it.
type BlockedAggregate struct {
	AggregateID string `json:"aggregate_id"`
	DeadID      int64  `json:"dead_id"`
	Waiting     int64  `json:"waiting"`
}

// Blocked counts the aggregates blocked behind a dead head and lists up to
// limit of them (BreakdownLimitDefault when 0), the oldest dead head first.
// It reads pending rows and probes the aggregate index once for each; under
// unordered delivery a dead message blocks nothing, and the figure says
// what would wait if the table were delivered in order.
func (a *Admin) Blocked(ctx context.Context, limit int) (*Blocked, error) {
	if limit <= 0 {
		limit = BreakdownLimitDefault
	}
	b, err := a.store.BlockedAggregates(ctx, a.db, min(limit, BreakdownLimitMax))
	if err != nil {
		return nil, fmt.Errorf("outbox: blocked aggregates: %w", err)
	}
	list := blockedList(b.List)
	if list == nil {
		list = []BlockedAggregate{}
	}
	return &Blocked{Aggregates: b.Aggregates, Messages: b.Messages, List: list}, nil
}

// blockedList is the public form of the store's list (nil when empty).
func blockedList(list []store.BlockedAggregate) []BlockedAggregate {
	var out []BlockedAggregate
	for _, g := range list {
		out = append(out, BlockedAggregate(g))
	}
	return out
}
