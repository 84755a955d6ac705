package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// cursorSQL are the snapshot-cursor statements (docs/snapshot-cursors.md).
type cursorSQL struct {
	load, fetch, parked, advance, undelivered, status string
	deadList, deadRetry, deadSkip, purge              string
	retryNow                                          string
}

func loadCursor(load func(string) string) cursorSQL {
	return cursorSQL{
		load:        load("sql/cursor_load.sql"),
		fetch:       load("sql/cursor_fetch.sql"),
		parked:      load("sql/cursor_parked.sql"),
		retryNow:    load("sql/cursor_retry_now.sql"),
		advance:     load("sql/cursor_advance.sql"),
		undelivered: load("sql/cursor_undelivered.sql"),
		status:      load("sql/cursor_status.sql"),
		deadList:    load("sql/cursor_dead_list.sql"),
		deadRetry:   load("sql/cursor_dead_retry.sql"),
		deadSkip:    load("sql/cursor_dead_skip.sql"),
		purge:       load("sql/cursor_purge.sql"),
	}
}

// EnableCursor prepares a table with shards for snapshot cursors: the xid
// column and its index, each shard's cursor, and the parked table
// (sql/cursor_enable.sql). Unfinished rows are delivered by the cursors
// once it commits. Enabling again is a no-op.
func (s *Store) EnableCursor(ctx context.Context, db pgx.Tx) error {
	if err := LockMigrationTx(ctx, db, s.Table.String(), nil); err != nil {
		return err
	}
	switch n, err := s.ShardCount(ctx, db); {
	case err != nil:
		return err
	case n == 0:
		return fmt.Errorf("table %s has no shards: snapshot cursors need them (migrate --shards N --cursor)", s.Table)
	}
	_, err := db.Exec(ctx, s.Table.replacer().Replace(rawSQL("sql/cursor_enable.sql")))
	return translate(err)
}

// CursorEnabled reports whether the table has snapshot cursors.
func (s *Store) CursorEnabled(ctx context.Context, db DB) (bool, error) {
	shape, err := s.shape(ctx, db)
	return shape.cursors, err
}

// WindowLoad is one shard whose window to load, held under its token:
// with Hi set, the window from Done to Hi after the id After; with Done
// set only, a new window after Done; with neither, the window stored for
// the shard, or a new one after its stored done.
type WindowLoad struct {
	ShardLease
	Done, Hi string
	After    int64
	// Origin is the origin Done and Hi were read on (Window.Origin).
	Origin string
}

// Window is what a load returned of one shard's window: its bounds, the
// position it was read after, whether it was open before (Resumed: not a
// new one) and, in id order, the ids of the window's committed rows after
// the position (at most the limit asked for). Origin is the server's
// origin (sql/cursor_origin.sql), which the snapshots are to be given back
// with; Moved says the load named snapshots of another origin (a failover
// since they were read): nothing else is set, and the shard is to be
// loaded again from what is stored.
type Window struct {
	Shard    int
	Done, Hi string
	After    int64
	Resumed  bool
	IDs      []int64
	Origin   string
	Moved    bool
}

// LoadWindows returns the window of each shard owner still holds under
// the token given, up to limit ids each (sql/cursor_load.sql). It locks
// and writes nothing.
func (s *Store) LoadWindows(ctx context.Context, db DB, owner string, loads []WindowLoad, limit int) ([]Window, error) {
	n := len(loads)
	shards, tokens, afters := make([]int32, n), make([]int64, n), make([]int64, n)
	dones, his, origins := make([]*string, n), make([]*string, n), make([]string, n)
	for i := range loads {
		l := &loads[i]
		shards[i], tokens[i], afters[i], origins[i] = int32(l.Shard), l.Token, l.After, l.Origin
		if l.Done != "" {
			dones[i] = &l.Done
		}
		if l.Hi != "" {
			his[i] = &l.Hi
		}
	}
	rows, err := db.Query(ctx, s.cursor.load, ownerText(owner), shards, tokens, dones, his, afters, limit, origins)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []Window
	for rows.Next() {
		var w Window
		var standby bool
		if err := rows.Scan(&w.Shard, &w.Done, &w.Hi, &w.After, &w.Resumed, &w.IDs, &standby, &w.Moved, &w.Origin); err != nil {
			return nil, translate(err)
		}
		if standby {
			return nil, ErrInRecovery
		}
		if w.Moved {
			w = Window{Shard: w.Shard, Origin: w.Origin, Moved: true}
		}
		out = append(out, w)
	}
	return out, translate(rows.Err())
}

// ErrInRecovery reports a snapshot-cursor read answered by a server in
// recovery (a standby): its snapshots do not list the transactions in
// progress on the primary, so its windows could skip their rows.
var ErrInRecovery = errors.New("snapshot cursors read the primary, and this server is in recovery (a standby)")

// FetchRows returns the rows of ids, in that order (an id no longer in
// the table is left out), appended to dst. Ordered, each row's Blocked
// says whether an earlier message of its aggregate is parked.
func (s *Store) FetchRows(ctx context.Context, db DB, ids []int64, ordered bool, dst []Row) ([]Row, time.Time, error) {
	rows, err := db.Query(ctx, s.cursor.fetch, ids, ordered)
	if err != nil {
		return dst, time.Time{}, translate(err)
	}
	return scanCursorRows(rows, dst)
}

// Parked is a read of parked messages: the rows, the database's time, and
// the origin they were read on (see Window), which their outcomes are to
// be written with.
type Parked struct {
	Rows   []Row
	Now    time.Time
	Origin string
}

// ReadParked returns up to limit parked messages that are due of each
// shard owner holds under the token given, leaving out the ids in flight;
// ordered, only the first parked message of each aggregate.
func (s *Store) ReadParked(ctx context.Context, db DB, owner string, leases []ShardLease, limit int, inFlight []int64, ordered bool) (Parked, error) {
	shards, tokens := splitLeases(leases)
	if inFlight == nil {
		inFlight = []int64{}
	}
	rows, err := db.Query(ctx, s.cursor.parked, ownerText(owner), shards, tokens, limit, inFlight, ordered)
	if err != nil {
		return Parked{}, translate(err)
	}
	var p Parked
	p.Rows, p.Now, err = scanCursorRows(rows, nil, &p.Origin)
	return p, err
}

// scanCursorRows scans the rows of a fetch or a parked read; n is how
// many are expected, if known; extra are the destinations of the columns
// after the common ones.
func scanCursorRows(rows pgx.Rows, out []Row, extra ...any) ([]Row, time.Time, error) {
	defer rows.Close()
	var (
		now          time.Time
		headers, uid *string
	)
	// One destination list for every row, pointed at each new row in turn:
	// a list built per row cost an allocation per message.
	dest := make([]any, 12, 12+len(extra))
	dest = append(dest, extra...)
	for rows.Next() {
		out = append(out, Row{})
		r := &out[len(out)-1]
		dest[0], dest[1], dest[2], dest[3], dest[4], dest[5] = &r.ID, &r.AggregateType, &r.AggregateID, &r.EventType, &r.Payload, &r.CreatedAt
		dest[6], dest[7], dest[8], dest[9], dest[10], dest[11] = &r.Attempts, &headers, &uid, &r.Shard, &now, &r.Blocked
		if err := rows.Scan(dest...); err != nil {
			return nil, time.Time{}, translate(err)
		}
		r.Attempts++
		r.setHeaders(headers)
		r.setUID(uid)
	}
	return out, now, translate(rows.Err())
}

// Advance is one shard's cursor move: held under its token, into the
// window from Done to Hi, after the id Last, or, with Close, past the
// whole window. An empty Hi moves nothing (the batch held parked messages
// only); an empty Done keeps the stored one.
type Advance struct {
	ShardLease
	Done, Hi string
	Last     int64
	Close    bool
	// Origin is the origin the batches were read on (see Window): the
	// shard is written only on the same.
	Origin string
}

// Park is the outcome of a message that is written under snapshot
// cursors: StatusDone clears its parked row, StatusPending parks it until
// Delay from now, StatusDead parks it dead. Attempts is its failed
// deliveries so far, this one included.
type Park struct {
	ID          int64
	Shard       int
	AggregateID string
	Status      string
	Delay       time.Duration
	Attempts    int
	Error       string
}

// AdvanceCursors moves the cursors and writes the parked messages of the
// shards owner still holds under the tokens given, in one statement
// (sql/cursor_advance.sql), and returns the shards it wrote: a shard not
// returned was lost, and nothing of it was written.
func (s *Store) AdvanceCursors(ctx context.Context, db DB, owner string, advances []Advance, parks []Park) (map[int]bool, error) {
	n := len(advances)
	shards, tokens, closes, lasts := make([]int32, n), make([]int64, n), make([]bool, n), make([]int64, n)
	his, dones, origins := make([]*string, n), make([]*string, n), make([]string, n)
	for i, a := range advances {
		shards[i], tokens[i], closes[i], lasts[i], origins[i] = int32(a.Shard), a.Token, a.Close, a.Last, a.Origin
		if a.Hi != "" {
			his[i] = &advances[i].Hi
		}
		if a.Done != "" {
			dones[i] = &advances[i].Done
		}
	}
	m := len(parks)
	ids, pshards, aggs, statuses := make([]int64, m), make([]int32, m), make([]string, m), make([]string, m)
	delays, attempts, errs := make([]int64, m), make([]int32, m), make([]string, m)
	for i, p := range parks {
		ids[i], pshards[i], aggs[i], statuses[i] = p.ID, int32(p.Shard), p.AggregateID, p.Status
		delays[i], attempts[i], errs[i] = p.Delay.Microseconds(), int32(p.Attempts), storable(p.Error, maxErrorText)
	}
	rows, err := db.Query(ctx, s.cursor.advance, ownerText(owner), shards, tokens, closes, his, lasts,
		ids, pshards, aggs, statuses, delays, attempts, errs, dones, origins)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	held := make(map[int]bool, n)
	for rows.Next() {
		var shard int
		if err := rows.Scan(&shard); err != nil {
			return nil, translate(err)
		}
		held[shard] = true
	}
	return held, translate(rows.Err())
}

// CursorUndelivered reports whether anything is left to deliver under
// snapshot cursors: a parked message waiting (ordered, not behind a dead
// one), or a committed row past its shard's cursor.
func (s *Store) CursorUndelivered(ctx context.Context, db DB, ordered bool) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, s.cursor.undelivered, ordered).Scan(&ok)
	return ok, translate(err)
}

// deadSQL picks the dead-letter statement for the table: under snapshot
// cursors the dead messages are parked, not marked in the status column.
func (s *Store) deadSQL(ctx context.Context, db DB, plain, cursor string) (string, error) {
	switch ok, err := s.CursorEnabled(ctx, db); {
	case err != nil:
		return "", err
	case ok:
		return cursor, nil
	}
	return plain, nil
}

// CursorPurgeBatch deletes, of up to limit rows in id order after the id
// after, those created more than olderThan ago that are delivered under
// snapshot cursors (sql/cursor_purge.sql). It returns how many it read
// and deleted, the last id read, and whether it read a row too young (the
// purge is then done).
func (s *Store) CursorPurgeBatch(ctx context.Context, db DB, olderThan time.Duration, after int64, limit int) (read, deleted, last int64, young bool, err error) {
	err = db.QueryRow(ctx, s.cursor.purge, olderThan.Microseconds(), after, limit).Scan(&read, &deleted, &last, &young)
	return read, deleted, last, young, translate(err)
}
