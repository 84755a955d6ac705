package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Status values of a row.
const (
	StatusPending    = "pending"
	StatusProcessing = "processing"
	StatusDone       = "done"
	StatusDead       = "dead"
)

// RowWrite is one fenced write: the new state of a row this owner claimed
// (what an outcome writes; the outcome itself is the root package's Outcome).
type RowWrite struct {
	ID           int64
	LeaseVersion int64
	Status       string        // pending, done or dead
	Delay        time.Duration // pending only: available_at = now() + Delay
	Refund       bool          // give the claim's attempt back (defer, release)
	// Shard is the row's shard under shard leases (FinalizeShards), where
	// LeaseVersion is that shard's token.
	Shard int
	// Error is last_error, ignored for done. Any bytes are accepted: the
	// store writes them as valid UTF-8 without NUL, at most 500 bytes.
	Error string
	// Born is the row's created_at as it was claimed: under row leases
	// the fence includes it, so a write meant for a row that is gone
	// cannot land on another row given the same id (a sequence that
	// handed the id out again after a failover, a restore or a reset; the
	// new row's first lease carries the same token and may have the same
	// owner). Zero leaves it out of the fence.
	Born time.Time
}

// born is w's Born for a statement: NULL when unset.
func (w *RowWrite) born() *time.Time {
	if w.Born.IsZero() {
		return nil
	}
	return &w.Born
}

// Finalize applies writes, in one statement when it can. It returns,
// aligned with writes, whether each one was written; false means nothing
// was written for that row, which stays processing until its lease expires
// and is claimed again: either its lease was lost (the usual case), or the
// database refused its write even with a fallback error text.
//
// One write never takes its batch-mates down: when the statement fails
// with a data error (SQLSTATE class 22, data exception, or 23, integrity
// constraint violation: a CHECK or trigger the table's owner added, say),
// the batch is split in halves until the rows the database refuses are
// alone, and each of those is tried once more with a fallback error text.
// Any other error fails the whole call and nothing is written.
func (s *Store) Finalize(ctx context.Context, db DB, owner string, writes []RowWrite) ([]bool, error) {
	if len(writes) == 0 {
		return nil, nil
	}
	held := make([]bool, len(writes))
	if err := s.finalizeSplit(ctx, db, ownerText(owner), writes, held); err != nil {
		return nil, err
	}
	return held, nil
}

// finalizeSplit writes writes, filling held, and isolates the writes
// the database refuses by bisection (see Finalize). Each statement is
// atomic, so a refused half wrote nothing and is tried again in parts.
func (s *Store) finalizeSplit(ctx context.Context, db DB, owner string, writes []RowWrite, held []bool) error {
	err := s.finalizeBatch(ctx, db, owner, writes, held)
	if !isDataError(err) {
		return err
	}
	if len(writes) > 1 {
		mid := len(writes) / 2
		if err := s.finalizeSplit(ctx, db, owner, writes[:mid], held[:mid]); err != nil {
			return err
		}
		return s.finalizeSplit(ctx, db, owner, writes[mid:], held[mid:])
	}
	fallback := writes[0]
	fallback.Error = fallbackError(err)
	if err := s.finalizeBatch(ctx, db, owner, []RowWrite{fallback}, held); !isDataError(err) {
		return err
	}
	held[0] = false // refused whatever its text: left to its lease
	return nil
}

// fallbackError replaces an error text the database refused: plain ASCII
// that says why the original is missing.
func fallbackError(err error) string {
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	return fmt.Sprintf("(the outcome's error text was refused by the database: SQLSTATE %s)", pgErr.Code)
}

// isDataError reports a statement refused for the data it carries (SQLSTATE
// class 22 or 23) rather than for the connection or the server's state.
func isDataError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && len(pgErr.Code) == 5 &&
		(pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23")
}

// finalizeBatch runs finalize.sql once for writes and sets held for the
// leases whose fence held. Inside a transaction it runs under a savepoint,
// so a refused statement does not abort the caller's transaction.
func (s *Store) finalizeBatch(ctx context.Context, db DB, owner string, writes []RowWrite, held []bool) (err error) {
	if tx, ok := db.(pgx.Tx); ok {
		sp, beginErr := tx.Begin(ctx)
		if beginErr != nil {
			return translate(beginErr)
		}
		defer func() {
			if err != nil {
				_ = sp.Rollback(context.WithoutCancel(ctx))
				return
			}
			err = translate(sp.Commit(ctx))
		}()
		db = sp
	}
	n := len(writes)
	ids := make([]int64, n)
	versions := make([]int64, n)
	statuses := make([]string, n)
	delays := make([]int64, n)
	refunds := make([]int32, n)
	errs := make([]string, n)
	borns := make([]*time.Time, n)
	for i, o := range writes {
		ids[i], versions[i], statuses[i], borns[i] = o.ID, o.LeaseVersion, o.Status, o.born()
		delays[i] = o.Delay.Microseconds()
		if o.Refund {
			refunds[i] = 1
		}
		errs[i] = storable(o.Error, maxErrorText)
	}
	rows, err := db.Query(ctx, s.finalize, owner, ids, versions, statuses, delays, refunds, errs, borns)
	if err != nil {
		return translate(err)
	}
	// Keyed by lease, not id: one batch may hold two leases of a row (a
	// stale one and the one that replaced it), and only one of them held.
	written := make(map[Lease]struct{}, n)
	var l Lease
	_, err = pgx.ForEachRow(rows, []any{&l.ID, &l.Version}, func() error {
		written[l] = struct{}{}
		return nil
	})
	if err != nil {
		return translate(err)
	}
	for i, o := range writes {
		_, held[i] = written[Lease{ID: o.ID, Version: o.LeaseVersion}]
	}
	return nil
}
