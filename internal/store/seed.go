package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// SeedStatements are the design article's original per-row statements. They
// exist for one purpose: `outboxd bench --variant seed`, so the batched
// design is always measured against the reference in the same run.
type SeedStatements struct{ Reap, Claim, Done string }

// Seed returns the reference statements for the store's table.
func (s *Store) Seed() SeedStatements { return s.seed }

// SeedClaim runs the reference claim: BEGIN, reap, claim, COMMIT.
func (s *Store) SeedClaim(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}, p ClaimParams, buf []Row) ([]Row, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, translate(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, s.seed.Reap, p.MaxAttempts); err != nil {
		return nil, translate(err)
	}
	rows, err := tx.Query(ctx, s.seed.Claim, p.Owner, p.Batch, p.Lease.Microseconds(), p.MaxAttempts)
	if err != nil {
		return nil, translate(err)
	}
	out := buf[:0]
	for rows.Next() {
		var r Row
		var payload string
		var now any
		if err := rows.Scan(&r.ID, &r.AggregateType, &r.AggregateID, &r.EventType, &payload,
			&r.CreatedAt, &r.Attempts, &r.LeaseVersion, &now); err != nil {
			rows.Close()
			return nil, translate(err)
		}
		r.Payload = []byte(payload)
		out = append(out, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	sortRows(out)
	return out, translate(tx.Commit(ctx))
}

// SeedDone runs the reference fenced mark_done for one row.
func (s *Store) SeedDone(ctx context.Context, db DB, id, version int64) (bool, error) {
	tag, err := db.Exec(ctx, s.seed.Done, id, version)
	if err != nil {
		return false, translate(err)
	}
	return tag.RowsAffected() == 1, nil
}
