package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Attempt is one publish that did not deliver its message, as the attempt
// history records it.
type Attempt struct {
	ID         int64     // the message's
	At         time.Time // when the publish ended, on the database's clock
	Dispatcher string
	Attempt    int // the message's attempt number (a defer gives it back)
	Duration   time.Duration
	Outcome    string // retry, defer or dead
	Status     int    // the receiver's status code; 0 when the sink has none
	Error      string
}

// RecordAttempts adds entries to the attempt history, each message keeping
// its newest keep (at least one). At most one entry per message.
func (s *Store) RecordAttempts(ctx context.Context, db DB, keep int, entries []Attempt) error {
	if len(entries) == 0 {
		return nil
	}
	n := len(entries)
	ids, ats, owners := make([]int64, n), make([]time.Time, n), make([]string, n)
	nums, durs, outcomes := make([]int32, n), make([]int64, n), make([]string, n)
	codes, errs := make([]int32, n), make([]string, n)
	for i, e := range entries {
		ids[i], ats[i], owners[i] = e.ID, e.At, ownerText(e.Dispatcher)
		nums[i], durs[i], outcomes[i] = int32(e.Attempt), e.Duration.Microseconds(), e.Outcome //nolint:gosec // attempts are bounded by max attempts
		codes[i], errs[i] = int32(e.Status), storable(e.Error, maxErrorText)                   //nolint:gosec // status codes are small
	}
	_, err := db.Exec(ctx, s.attemptsRecord, ids, ats, owners, nums, durs, outcomes, codes, errs, max(keep, 1))
	return translate(err)
}

// Attempts returns the newest limit entries of message id's attempt
// history, newest first.
func (s *Store) Attempts(ctx context.Context, db DB, id int64, limit int) ([]Attempt, error) {
	rows, err := db.Query(ctx, s.attemptsList, id, limit)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) {
		a := Attempt{ID: id}
		var us int64
		var code *int32
		err := row.Scan(&a.At, &a.Dispatcher, &a.Attempt, &us, &a.Outcome, &code, &a.Error)
		a.Duration = time.Duration(us) * time.Microsecond
		if code != nil {
			a.Status = int(*code)
		}
		return a, err
	})
	return out, translate(err)
}
