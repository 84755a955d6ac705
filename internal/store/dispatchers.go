package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Beat is what a dispatcher reports of itself.
type Beat struct {
	Owner, Host, Version, LeaseMode string
	Every                           time.Duration // the beat's interval
	InFlight                        int
	Delivered1m                     int64
	First                           bool // the run's first beat
	// Flow is the dispatcher's flow report, JSON; nil writes NULL.
	Flow []byte
}

// Dispatcher is a live dispatcher as its last beat reported it.
type Dispatcher struct {
	Owner, Host, Version, LeaseMode string
	StartedAt, LastSeen             time.Time
	InFlight                        int
	Delivered1m                     int64
	// Flow is its last flow report, JSON; nil when it wrote none.
	Flow []byte
}

// Beat records b.
func (s *Store) Beat(ctx context.Context, db DB, b Beat) error {
	_, err := db.Exec(ctx, s.beat, ownerText(b.Owner), storable(b.Host, maxOwnerText), storable(b.Version, maxOwnerText),
		b.LeaseMode, b.Every.Microseconds(), b.InFlight, b.Delivered1m, b.First, flowText(b.Flow))
	return translate(err)
}

// Leave deletes owner's row.
func (s *Store) Leave(ctx context.Context, db DB, owner string) error {
	_, err := db.Exec(ctx, s.leave, ownerText(owner))
	return translate(err)
}

// Dispatchers lists the live dispatchers. On a standby, which cannot read
// the unlogged table, it lists none.
func (s *Store) Dispatchers(ctx context.Context, db DB) ([]Dispatcher, error) {
	rows, err := db.Query(ctx, s.dispatchers)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Dispatcher, error) {
		var d Dispatcher
		var flow *string
		err := row.Scan(&d.Owner, &d.Host, &d.Version, &d.LeaseMode, &d.StartedAt, &d.LastSeen, &d.InFlight, &d.Delivered1m, &flow)
		if flow != nil {
			d.Flow = []byte(*flow)
		}
		return d, err
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "0A000" { // feature_not_supported: an unlogged table in recovery
		return nil, nil
	}
	return out, translate(err)
}

// flowText is a flow report as the beat's parameter: NULL for none.
func flowText(flow []byte) *string {
	if flow == nil {
		return nil
	}
	s := string(flow)
	return &s
}
