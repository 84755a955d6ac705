package store

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Status is a snapshot of the table's health.
type Status struct {
	Counts map[string]int64
	// OldestPendingAge is the age of the oldest pending or processing row;
	// -1 when there is none.
	OldestPendingAge time.Duration
	ExpiredLeases    int64
	// DoneEstimated says Counts["done"] is the planner's estimate.
	DoneEstimated bool
	// Attempts is the histogram of attempts over pending and processing rows.
	Attempts map[int]int64
}

// Status reads the table's health figures in one statement.
func (s *Store) Status(ctx context.Context, db DB) (Status, error) {
	var counts, attempts []byte
	var age *float64
	st := Status{Counts: map[string]int64{}, Attempts: map[int]int64{}}
	shape, err := s.shape(ctx, db)
	if err != nil {
		return Status{}, err
	}
	if shape.cursors {
		f, err := s.cursorFigures(ctx, db)
		if err != nil {
			return Status{}, err
		}
		st.Counts = map[string]int64{StatusPending: f.pending, StatusProcessing: 0, StatusDone: f.done, StatusDead: f.dead}
		st.DoneEstimated, st.Attempts, st.OldestPendingAge = f.doneEstimated, f.attempts, f.oldest
		return s.withShardFigures(ctx, db, shape, st)
	}
	if err := db.QueryRow(ctx, s.status, s.Table.ident("")).Scan(&counts, &age, &st.ExpiredLeases, &attempts, &st.DoneEstimated); err != nil {
		return Status{}, translate(err)
	}
	for _, k := range []string{StatusPending, StatusProcessing, StatusDone, StatusDead} {
		st.Counts[k] = 0
	}
	if err := json.Unmarshal(counts, &st.Counts); err != nil {
		return Status{}, err
	}
	var hist map[string]int64
	if err := json.Unmarshal(attempts, &hist); err != nil {
		return Status{}, err
	}
	for k, v := range hist {
		n, err := strconv.Atoi(k)
		if err != nil {
			return Status{}, err
		}
		st.Attempts[n] = v
	}
	st.OldestPendingAge = -1
	if age != nil && !math.IsNaN(*age) {
		st.OldestPendingAge = time.Duration(*age * float64(time.Second))
	}
	return s.withShardFigures(ctx, db, shape, st)
}

// withShardFigures counts as processing what shard-lease dispatchers
// report in flight: no claim is written, so the messages being delivered
// are pending in the table.
func (s *Store) withShardFigures(ctx context.Context, db DB, shape tableShape, st Status) (Status, error) {
	inFlight, expired, err := s.shardFigures(ctx, db, shape)
	if err != nil {
		return Status{}, err
	}
	moved := min(inFlight, st.Counts[StatusPending])
	st.Counts[StatusPending] -= moved
	st.Counts[StatusProcessing] += moved
	st.ExpiredLeases += expired
	return st, nil
}

// DeadRow is a dead message with its diagnosis.
type DeadRow struct {
	Row
	LastError string
}

// DeadList returns up to limit dead rows with id > afterID, oldest first.
func (s *Store) DeadList(ctx context.Context, db DB, afterID int64, limit int) ([]DeadRow, error) {
	q, err := s.deadSQL(ctx, db, s.deadList, s.cursor.deadList)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, q, afterID, limit)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeadRow, error) {
		var d DeadRow
		var payload string
		err := row.Scan(&d.ID, &d.AggregateType, &d.AggregateID, &d.EventType, &payload,
			&d.CreatedAt, &d.Attempts, &d.LeaseVersion, &d.LastError, &d.UID)
		d.Payload = []byte(payload)
		return d, err
	})
	return out, translate(err)
}

// DeadRetry moves dead rows back to pending with attempts reset and wakes
// the dispatchers. ids nil means every dead row. Returns the ids moved.
func (s *Store) DeadRetry(ctx context.Context, db DB, ids []int64, channel string) ([]int64, error) {
	return s.moveAndWake(ctx, db, s.deadRetry, s.cursor.deadRetry, ids, channel)
}

// moveAndWake runs a statement that moves ids and notifies channel once
// per row moved (plain on a table, cursor on one under snapshot cursors),
// and returns the ids moved.
func (s *Store) moveAndWake(ctx context.Context, db DB, plain, cursor string, ids []int64, channel string) ([]int64, error) {
	q, err := s.deadSQL(ctx, db, plain, cursor)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, q, ids, channel)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (int64, error) {
		var id int64
		var ignored bool
		err := row.Scan(&id, &ignored)
		return id, err
	})
	return out, translate(err)
}

// NotifyDue is the payload of the notification that says messages were
// made due earlier than the dispatchers know (RetryNow).
const NotifyDue = "due"

// RetryNow makes the messages of ids that wait for a later attempt due
// now and notifies channel with NotifyDue. Returns the ids moved.
func (s *Store) RetryNow(ctx context.Context, db DB, ids []int64, channel string) ([]int64, error) {
	return s.moveAndWake(ctx, db, s.retryNow, s.cursor.retryNow, ids, channel)
}

// DeadSkip marks dead rows done without delivering them. Returns the ids moved.
func (s *Store) DeadSkip(ctx context.Context, db DB, ids []int64) ([]int64, error) {
	q, err := s.deadSQL(ctx, db, s.deadSkip, s.cursor.deadSkip)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, q, ids)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	return out, translate(err)
}

// PurgeCursor is where the next purge batch starts: after the done row
// (DoneAt, ID). The zero value starts at the first.
type PurgeCursor struct {
	DoneAt time.Time
	ID     int64
}

// PurgeIndex reports whether the index the purge reads exists and is
// valid. A table that lacks it is outdated: each batch would read every
// done row.
func (s *Store) PurgeIndex(ctx context.Context, db DB) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, s.purgeIndex, s.Table.ident(suffixDone)).Scan(&ok)
	return ok, translate(err)
}

// PurgeBatch deletes at most limit done rows that finished more than
// olderThan ago, oldest first, after the cursor. It returns how many it
// deleted and the cursor for the next batch (after, when none).
func (s *Store) PurgeBatch(ctx context.Context, db DB, olderThan time.Duration, after PurgeCursor, limit int) (int64, PurgeCursor, error) {
	at := pgtype.Timestamptz{Time: after.DoneAt, Valid: true}
	if after.DoneAt.IsZero() {
		at = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	var n int64
	var lastAt *time.Time
	var lastID *int64
	err := db.QueryRow(ctx, s.purge, olderThan.Microseconds(), at, after.ID, limit).Scan(&n, &lastAt, &lastID)
	if err != nil {
		return 0, after, translate(err)
	}
	if n == 0 || lastAt == nil || lastID == nil {
		return 0, after, nil
	}
	return n, PurgeCursor{DoneAt: *lastAt, ID: *lastID}, nil
}

// InsertSQL returns a producer INSERT of n messages with positional
// parameters $1..$5n (aggregate_type, aggregate_id, event_type, payload,
// headers per row; payload and headers as JSON text, headers may be NULL)
// that returns the new ids in insertion order. It uses only plain
// placeholders, so any PostgreSQL driver can run it.
func (s *Store) InsertSQL(n int) string {
	var b []byte
	b = append(b, "INSERT INTO "...)
	b = append(b, s.Table.ident("")...)
	b = append(b, " (aggregate_type, aggregate_id, event_type, payload, headers) VALUES "...)
	for i := range n {
		if i > 0 {
			b = append(b, ", "...)
		}
		p := int64(i*InsertParams + 1)
		b = append(b, "($"...)
		b = strconv.AppendInt(b, p, 10)
		b = append(b, ", $"...)
		b = strconv.AppendInt(b, p+1, 10)
		b = append(b, ", $"...)
		b = strconv.AppendInt(b, p+2, 10)
		b = append(b, ", $"...)
		b = strconv.AppendInt(b, p+3, 10)
		b = append(b, "::text::jsonb, $"...)
		b = strconv.AppendInt(b, p+4, 10)
		b = append(b, "::text::jsonb)"...)
	}
	b = append(b, " RETURNING id"...)
	return string(b)
}

// InsertParams is the number of parameters per row of InsertSQL.
const InsertParams = 5

// UndeliveredTypes returns the distinct (aggregate_type, event_type) pairs
// of pending and processing rows (at most 10,000 pairs).
func (s *Store) UndeliveredTypes(ctx context.Context, db DB) ([][2]string, error) {
	rows, err := db.Query(ctx, s.types)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
		var p [2]string
		err := row.Scan(&p[0], &p[1])
		return p, err
	})
	return out, translate(err)
}
