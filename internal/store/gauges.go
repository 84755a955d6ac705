package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Gauges are an outbox table's health figures that are cheap enough to read
// every few seconds however large the table grows: what the metrics package
// polls. The root package exports this type as outbox.Gauges. See
// gauges.sql for how each one is obtained.
type Gauges struct {
	// Pending, Processing and Dead are exact row counts, read through the
	// partial indexes that hold only rows not yet done.
	Pending, Processing, Dead int64
	// Done is exact up to 10,000 and past that the planner's row count of
	// the table (as of its last ANALYZE or VACUUM) less the exact counts,
	// as in Status; DoneEstimated says which.
	Done          int64
	DoneEstimated bool
	// OldestPendingAge is the age of the oldest pending or processing
	// message, on the database's clock; 0 when there is none.
	OldestPendingAge time.Duration
	// ExpiredLeases counts processing rows whose lease has run out (crashed
	// or stalled workers).
	ExpiredLeases int64
	// LiveDispatchers counts the dispatchers that reported themselves
	// within three of their beats, idle or busy.
	LiveDispatchers int64
}

// AnalyzedAt is when the planner's row count of the table was last set (an
// ANALYZE or VACUUM, manual or automatic), which an estimated done count
// is as of; nil when never.
func (s *Store) AnalyzedAt(ctx context.Context, db DB) (*time.Time, error) {
	var at *time.Time
	err := db.QueryRow(ctx, s.analyzedAt, s.Table.ident("")).Scan(&at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return at, translate(err)
}

// Gauges reads the gauges in one statement.
func (s *Store) Gauges(ctx context.Context, db DB) (Gauges, error) {
	var g Gauges
	var age float64
	shape, err := s.shape(ctx, db)
	if err != nil {
		return Gauges{}, err
	}
	if shape.cursors {
		f, err := s.cursorFigures(ctx, db)
		if err != nil {
			return Gauges{}, err
		}
		g.Pending, g.Dead, g.Done, g.DoneEstimated = f.pending, f.dead, f.done, f.doneEstimated
		g.OldestPendingAge = max(f.oldest, 0)
	} else {
		err := db.QueryRow(ctx, s.gauges, s.Table.ident("")).
			Scan(&g.Pending, &g.Processing, &g.Dead, &g.Done, &age, &g.ExpiredLeases, &g.DoneEstimated)
		if err != nil {
			return Gauges{}, translate(err)
		}
		g.OldestPendingAge = time.Duration(age * float64(time.Second))
	}
	inFlight, expired, err := s.shardFigures(ctx, db, shape)
	if err != nil {
		return Gauges{}, err
	}
	moved := min(inFlight, g.Pending)
	g.Pending, g.Processing, g.ExpiredLeases = g.Pending-moved, g.Processing+moved, g.ExpiredLeases+expired
	live, err := s.Dispatchers(ctx, db)
	if err != nil {
		return Gauges{}, err
	}
	g.LiveDispatchers = int64(len(live))
	return g, nil
}
