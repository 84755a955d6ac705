package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Pause is a destination an operator paused: its messages are held back,
// pending, until it is resumed.
type Pause struct {
	// Route is the paused destination's name; "" is the whole table.
	Route  string
	By     string
	At     time.Time
	Reason string
}

// PausedError is the last error of a message held back because its
// destination is paused: the mark the wake of a resume looks for.
const PausedError = "held back: its destination is paused"

// NotifyPause is the payload of the notification that says a pause was
// set or lifted: the dispatchers read the pauses again.
const NotifyPause = "pause"

// maxPauseReason is how much of a reason is stored (outbox.CheckPauseReason
// refuses more).
const maxPauseReason = 1000

func scanPause(row pgx.CollectableRow) (Pause, error) {
	var p Pause
	err := row.Scan(&p.Route, &p.By, &p.At, &p.Reason)
	return p, err
}

// SetPause pauses route ("" the whole table) for by, with a reason. When
// it is paused already, the pause in force is returned unchanged, with
// made false.
func (s *Store) SetPause(ctx context.Context, db DB, route, by, reason string) (p Pause, made bool, err error) {
	err = db.QueryRow(ctx, s.pause.set, route, storable(by, maxOwnerText), storable(reason, maxPauseReason)).
		Scan(&p.Route, &p.By, &p.At, &p.Reason, &made)
	return p, made, translate(err)
}

// LiftPause resumes route ("" the whole table) and returns the pause it
// lifted; ok is false when route was not paused.
func (s *Store) LiftPause(ctx context.Context, db DB, route string) (p Pause, ok bool, err error) {
	rows, err := db.Query(ctx, s.pause.lift, route)
	if err != nil {
		return Pause{}, false, translate(err)
	}
	lifted, err := pgx.CollectRows(rows, scanPause)
	if err != nil || len(lifted) == 0 {
		return Pause{}, false, translate(err)
	}
	return lifted[0], true, nil
}

// Pauses lists the pauses in force, the whole table's first.
func (s *Store) Pauses(ctx context.Context, db DB) ([]Pause, error) {
	rows, err := db.Query(ctx, s.pause.list)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, scanPause)
	return out, translate(err)
}

// WakePaused makes the messages held back for a paused destination due
// now (see pause_wake.sql), in the table and, under snapshot cursors, in
// its parked table, and returns how many it woke. The caller notifies the
// dispatchers (NotifyPause).
func (s *Store) WakePaused(ctx context.Context, db DB) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, s.pause.wake, PausedError).Scan(&n); err != nil {
		return 0, translate(err)
	}
	parked, err := s.CursorEnabled(ctx, db)
	if err != nil {
		return n, err
	}
	if !parked {
		return n, nil
	}
	var m int64
	if err := db.QueryRow(ctx, s.pause.wakeParked, PausedError).Scan(&m); err != nil {
		return n, translate(err)
	}
	return n + m, nil
}

type pauseSQL struct{ set, lift, list, wake, wakeParked string }

func loadPauses(load func(string) string) pauseSQL {
	return pauseSQL{
		set: load("sql/pause_set.sql"), lift: load("sql/pause_lift.sql"), list: load("sql/pause_list.sql"),
		wake: load("sql/pause_wake.sql"), wakeParked: load("sql/pause_wake_parked.sql"),
	}
}
