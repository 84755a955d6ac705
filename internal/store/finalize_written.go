package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// FinalizeWritten reports, aligned with writes, which ones are already
// written (see finalize_written.sql). A finalize retried after an error
// that may have followed its commit asks this about the writes its retry
// found unheld, so a write that landed is not taken for a lost lease.
func (s *Store) FinalizeWritten(ctx context.Context, db DB, writes []RowWrite) ([]bool, error) {
	n := len(writes)
	ids := make([]int64, n)
	versions := make([]int64, n)
	statuses := make([]string, n)
	errs := make([]string, n)
	borns := make([]*time.Time, n)
	for i, o := range writes {
		ids[i], versions[i], statuses[i], borns[i] = o.ID, o.LeaseVersion, o.Status, o.born()
		errs[i] = storable(o.Error, maxErrorText)
	}
	rows, err := db.Query(ctx, s.finalizeWritten, ids, versions, statuses, errs, borns)
	if err != nil {
		return nil, translate(err)
	}
	written := make(map[Lease]struct{}, n)
	var l Lease
	if _, err := pgx.ForEachRow(rows, []any{&l.ID, &l.Version}, func() error {
		written[l] = struct{}{}
		return nil
	}); err != nil {
		return nil, translate(err)
	}
	out := make([]bool, n)
	for i, o := range writes {
		_, out[i] = written[Lease{ID: o.ID, Version: o.LeaseVersion}]
	}
	return out, nil
}

// ReleaseUntracked returns to pending, the attempt refunded, every row
// owner holds processing whose id is not in tracked, and returns their ids
// (see release_untracked.sql): rows of a claim whose reply was lost.
func (s *Store) ReleaseUntracked(ctx context.Context, db DB, owner string, tracked []int64) ([]int64, error) {
	if tracked == nil {
		tracked = []int64{}
	}
	rows, err := db.Query(ctx, s.releaseUntracked, ownerText(owner), tracked)
	if err != nil {
		return nil, translate(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return ids, translate(err)
}
