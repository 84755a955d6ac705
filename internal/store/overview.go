package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Breakdown is one group of rows not done.
type Breakdown struct {
	Key                       string
	Pending, Processing, Dead int64
}

// BreakdownBy groups the rows not done by "event_type" or
// "aggregate_type", the limit largest groups first.
func (s *Store) BreakdownBy(ctx context.Context, db DB, column string, limit int) ([]Breakdown, error) {
	c, err := s.consoleFor(ctx, db)
	if err != nil {
		return nil, err
	}
	q := c.breakdownEvent
	if column == "aggregate_type" {
		q = c.breakdownAggregate
	}
	rows, err := db.Query(ctx, q, limit)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Breakdown, error) {
		var b Breakdown
		err := row.Scan(&b.Key, &b.Pending, &b.Processing, &b.Dead)
		return b, err
	})
	return out, translate(err)
}

// Owner is a dispatcher holding leases.
type Owner struct {
	Owner      string
	InFlight   int64
	LeaseUntil time.Time
	Expired    int64
	Shards     []int // under shard leases, the shards held
}

// Owners returns the owners holding leases, by name.
func (s *Store) Owners(ctx context.Context, db DB) ([]Owner, error) {
	rows, err := db.Query(ctx, s.console.owners)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Owner, error) {
		var o Owner
		err := row.Scan(&o.Owner, &o.InFlight, &o.LeaseUntil, &o.Expired)
		return o, err
	})
	if err != nil {
		return nil, translate(err)
	}
	shape, err := s.shape(ctx, db)
	if err != nil || !shape.shards || !shape.current {
		return out, err
	}
	rows, err = db.Query(ctx, s.shards.owners)
	if err != nil {
		return nil, translate(err)
	}
	shardOwners, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Owner, error) {
		var o Owner
		var shards []int32
		err := row.Scan(&o.Owner, &o.InFlight, &o.LeaseUntil, &o.Expired, &shards)
		for _, n := range shards {
			o.Shards = append(o.Shards, int(n))
		}
		return o, err
	})
	return append(out, shardOwners...), translate(err)
}
