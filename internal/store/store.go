// Package store owns every SQL statement outboxd runs. Statements live in
// embedded .sql files named after the method that runs them; the table name
// enters only through quoted identifiers substituted once, in New.
package store

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

//go:embed sql/*.sql migration/*.sql
var files embed.FS

// ErrTableMissing reports that the outbox table does not exist.
var ErrTableMissing = errors.New("table does not exist (run `outboxd migrate` first)")

// ErrTableOutdated reports that the table lacks columns this version reads.
var ErrTableOutdated = errors.New("table was created by an older version (run `outboxd migrate` to upgrade it)")

// DB is what the store needs from a connection, pool or transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store runs the outbox's statements against one table.
type Store struct {
	Table Table

	claim, claimOrdered, finalize, resolve, wait, unwait               string
	finalizeWritten, releaseUntracked                                  string
	status, deadList, deadRetry, deadSkip, purge, undelivered, blocked string
	purgeIndex                                                         string
	types, heartbeat                                                   string
	gauges, access, dropWake                                           string
	attemptsRecord, attemptsList                                       string
	beat, leave, dispatchers                                           string
	retryNow, analyzedAt                                               string
	console                                                            consoleSQL
	// cursorConsole is console for a table under snapshot cursors.
	cursorConsole consoleSQL
	shards        shardSQL
	cursor        cursorSQL
	pause         pauseSQL
}

// New prepares the statements for the named table ("name" or "schema.name").
func New(table string) (*Store, error) {
	t, err := ParseTable(table)
	if err != nil {
		return nil, err
	}
	return newStore(t), nil
}

// Qualified returns the store for the same table named with schema, so
// that no statement depends on the session's search_path. Callers pass the
// schema Resolve returned.
func (s *Store) Qualified(schema string) *Store {
	return newStore(Table{Schema: schema, Name: s.Table.Name})
}

func newStore(t Table) *Store {
	r := t.replacer()
	load := func(name string) string { return r.Replace(withFragments(rawSQL(name))) }
	// Templates are assembled before the names go in: a name may contain
	// "{{reap}}" itself.
	reap := strings.TrimSuffix(strings.TrimSpace(stripComments(rawSQL("sql/reap.sql"))), ",") + ","
	reapAs := func(since string) string { return strings.ReplaceAll(reap, "{{expired_since}}", since) }
	claim := strings.ReplaceAll(rawSQL("sql/claim.sql"), "{{reap}}", reapAs("$8::timestamptz"))
	claimOrdered := strings.ReplaceAll(rawSQL("sql/claim_ordered.sql"), "{{reap}}", reapAs("$9::timestamptz"))
	return &Store{
		Table:            t,
		claim:            r.Replace(claim),
		claimOrdered:     r.Replace(claimOrdered),
		finalize:         load("sql/finalize.sql"),
		finalizeWritten:  load("sql/finalize_written.sql"),
		releaseUntracked: load("sql/release_untracked.sql"),
		resolve:          load("sql/resolve.sql"),
		wait:             load("sql/wait.sql"),
		unwait:           load("sql/unwait.sql"),
		status:           load("sql/status.sql"),
		deadList:         load("sql/dead_list.sql"),
		deadRetry:        load("sql/dead_retry.sql"),
		deadSkip:         load("sql/dead_skip.sql"),
		purge:            load("sql/purge.sql"),
		purgeIndex:       load("sql/purge_index.sql"),
		undelivered:      load("sql/undelivered.sql"),
		blocked:          load("sql/blocked.sql"),
		types:            load("sql/undelivered_types.sql"),
		heartbeat:        load("sql/heartbeat.sql"),
		gauges:           load("sql/gauges.sql"),
		access:           load("sql/access.sql"),
		dropWake:         load("sql/drop_wake_trigger.sql"),
		attemptsRecord:   load("sql/attempts_record.sql"),
		attemptsList:     load("sql/attempts_list.sql"),
		beat:             load("sql/dispatcher_beat.sql"),
		leave:            load("sql/dispatcher_leave.sql"),
		dispatchers:      load("sql/dispatcher_list.sql"),
		retryNow:         load("sql/retry_now.sql"),
		analyzedAt:       load("sql/analyzed_at.sql"),
		console:          loadConsole(r, "{{table}}"),
		cursorConsole:    cursorConsole(r),
		shards:           loadShards(load),
		cursor:           loadCursor(load),
		pause:            loadPauses(load),
	}
}

// rawSQL is an embedded file's text, before any name goes in.
func rawSQL(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time; absence is a build bug
	}
	return string(b)
}

// cursorPast is sql/cursor_past.sql, the rows past their shard's cursor
// as two CTEs, for the statements that read them ({{cursor_past}}).
var cursorPast = strings.TrimSpace(stripComments(rawSQL("sql/cursor_past.sql")))

// cursorOrigin is sql/cursor_origin.sql, the origin of the snapshots a
// statement takes ({{cursor_origin}}).
var cursorOrigin = strings.TrimSpace(stripComments(rawSQL("sql/cursor_origin.sql")))

// withFragments puts the shared fragments into a statement, before the
// names go in (a name may contain a placeholder itself).
func withFragments(sql string) string {
	return strings.NewReplacer("{{cursor_past}}", cursorPast, "{{cursor_origin}}", cursorOrigin).Replace(sql)
}

// stripComments drops whole-line SQL comments from a fragment spliced into
// another statement.
func stripComments(sql string) string {
	var b strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteString("\n")
		}
	}
	return b.String()
}

// dollarTag returns a dollar-quote delimiter that does not occur in name, so
// the name quoted inside the wake function's body cannot end the body.
func dollarTag(name string) string {
	for i := 0; ; i++ {
		tag := "$outboxd" + strconv.Itoa(i) + "$"
		if !strings.Contains(name, tag) {
			return tag
		}
	}
}

// maxChannel is PostgreSQL's limit on a notification channel name (the
// identifier limit): pg_notify raises an error past it.
const maxChannel = 63

// checkChannel refuses a resolved table whose wake-up channel is too long:
// its trigger would fail every INSERT while a dispatcher waits.
func checkChannel(t Table) error {
	if n := len(t.Channel()); n > maxChannel {
		return fmt.Errorf("outbox table %s: its notification channel is %d bytes, over PostgreSQL's %d; use a shorter schema or table name",
			t.Channel(), n, maxChannel)
	}
	return nil
}

// QuotedTable is the table's quoted identifier, for callers that build
// producer statements (Enqueue) or tests.
func (s *Store) QuotedTable() string { return s.Table.Quoted() }

// Resolve checks that the table exists and returns it as PostgreSQL
// resolved it: schema and name as the catalogs spell them, from which every
// derived name comes (Table.Channel, Table.Waiters).
func (s *Store) Resolve(ctx context.Context, db DB) (Table, error) {
	var t Table
	var current bool
	err := db.QueryRow(ctx, s.resolve, s.Table.ident("")).Scan(&t.Schema, &t.Name, &current)
	if errors.Is(err, pgx.ErrNoRows) {
		return Table{}, ErrTableMissing
	}
	if err != nil {
		return Table{}, translate(err)
	}
	if err := checkChannel(t); err != nil {
		return Table{}, err
	}
	if !current {
		return Table{}, ErrTableOutdated
	}
	return t, nil
}

// DropWakeTrigger removes the table's wake-up trigger (see
// drop_wake_trigger.sql); Migrate creates it again.
func (s *Store) DropWakeTrigger(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, s.dropWake)
	return translate(err)
}

// Row is a claimed row.
type Row struct {
	ID            int64
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       []byte
	CreatedAt     time.Time
	Attempts      int
	LeaseVersion  int64
	// Headers is the headers column decoded (see decodeHeaders); nil when
	// NULL, or when the column is not a JSON object (BadHeaders).
	Headers map[string]string
	// BadHeaders reports a headers column that is not a JSON object (written
	// by hand): it is not passed on.
	BadHeaders bool
	// Shard is the row's shard under shard leases (ReadShards), whose
	// token is then LeaseVersion; 0 otherwise.
	Shard int
	// UID is the row's uid column, the message's identity, in its text
	// form; "" for a row inserted before the column was added.
	UID string
	// Prev is, under shard leases, the id of the previous unfinished row
	// of the row's aggregate (0: none): the row goes out after it.
	Prev int64
	// Ready is, for a row an unordered row claim took from the ready
	// queue, its place there; zero otherwise (an expired lease claimed
	// again, another claim).
	Ready Position
	// Blocked is, for a row read under ordered snapshot cursors, whether
	// an earlier message of its aggregate is parked: it is held back
	// behind it.
	Blocked bool
}

// Position is a place in the ready queue, which is ordered by
// (available_at, id). The zero Position is before every row.
type Position struct {
	At time.Time
	ID int64
}

// IsZero reports whether p is the front of the queue.
func (p Position) IsZero() bool { return p.At.IsZero() && p.ID == 0 }

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	return p.At.Before(q.At) || p.At.Equal(q.At) && p.ID < q.ID
}

// at is the position's available_at as the claim takes it: the front is
// -infinity, before any time a row may hold.
func (p Position) at() pgtype.Timestamptz {
	if p.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: p.At, Valid: true}
}

func (r *Row) setUID(text *string) {
	if text != nil {
		r.UID = *text
	}
}

// setHeaders decodes a claimed row's headers column (nil for SQL NULL).
func (r *Row) setHeaders(text *string) {
	if text == nil {
		return
	}
	h, err := decodeHeaders(*text)
	r.Headers, r.BadHeaders = h, err != nil
}

// ClaimParams are the inputs of Claim.
type ClaimParams struct {
	Owner       string
	Batch       int
	Lease       time.Duration
	MaxAttempts int
	Ordered     bool
	// ClearWait drops the owner's waiter row in the same statement.
	ClearWait bool
	// After is where an unordered claim starts in the ready queue: the
	// rows after it (the zero Position: every row). Expired leases are
	// claimed wherever they are.
	After Position
	// Expired is which expired leases the claim looks for, to claim them
	// again or, with no attempt left, to send their rows dead.
	Expired ExpiredLeases
	// Cursor is where an ordered claim's sweep over aggregates resumes
	// (ClaimOrdered): after the aggregate it points to, or at the first
	// aggregate when nil. A pointer, because '' is an aggregate_id like any
	// other and cannot also mean "start over".
	Cursor *string
}

// ExpiredLeases bounds a claim's look for expired leases: none with
// Skip, else those that ran out at or after Since (the zero time: all).
type ExpiredLeases struct {
	Skip  bool
	Since time.Time
}

func (e ExpiredLeases) since() pgtype.Timestamptz {
	switch {
	case e.Skip:
		return pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	case e.Since.IsZero():
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: e.Since, Valid: true}
}

// Claim reaps expired rows that used up their attempts, then leases up to
// Batch rows to Owner, in one statement (one round trip, one commit). Rows
// come back sorted by id, with the database's now() at claim time. With
// Ordered, only heads of aggregates are claimed, sweeping from the first
// aggregate (see ClaimOrdered for a sweep that continues across calls).
func (s *Store) Claim(ctx context.Context, db DB, p ClaimParams, buf []Row) ([]Row, time.Time, error) {
	if p.Ordered {
		rows, now, _, err := s.ClaimOrdered(ctx, db, p, buf)
		return rows, now, err
	}
	rows, err := db.Query(ctx, s.claim, ownerText(p.Owner), p.Batch, p.Lease.Microseconds(), p.MaxAttempts, p.ClearWait,
		p.After.at(), p.After.ID, p.Expired.since())
	if err != nil {
		return nil, time.Time{}, translate(err)
	}
	defer rows.Close()
	out := buf[:0]
	var now time.Time
	for rows.Next() {
		var r Row
		var payload string
		var headers, uid *string
		var ready pgtype.Timestamptz
		if err := rows.Scan(&r.ID, &r.AggregateType, &r.AggregateID, &r.EventType, &payload,
			&r.CreatedAt, &r.Attempts, &r.LeaseVersion, &headers, &uid, &now, &ready); err != nil {
			return nil, time.Time{}, translate(err)
		}
		if ready.Valid && ready.InfinityModifier == pgtype.Finite {
			r.Ready = Position{At: ready.Time, ID: r.ID}
		}
		r.Payload = []byte(payload)
		r.setHeaders(headers)
		r.setUID(uid)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, translate(err)
	}
	sortRows(out)
	return out, now, nil
}

// orderedMaxVisit bounds the aggregates one ordered claim visits, so a claim
// costs the same however many aggregates are busy; the next claim carries on
// from where this one stopped.
func orderedMaxVisit(batch int) int { return max(1000, 10*batch) }

// ClaimOrdered is the ordered claim: it leases up to Batch heads of
// aggregates, visiting aggregates in aggregate_id order from p.Cursor, and
// returns the cursor to pass to the next call (nil when the sweep reached
// the last aggregate and the next should start over). If a sweep that did
// not start at the beginning finds nothing, it starts over at once, so an
// empty result means no head is claimable anywhere.
func (s *Store) ClaimOrdered(ctx context.Context, db DB, p ClaimParams, buf []Row) ([]Row, time.Time, *string, error) {
	// A claim that finds nothing goes on sweeping (a few statements at most)
	// so that an empty result usually means no head is claimable anywhere;
	// a sweep too long for that resumes from the cursor next time.
	start, cursor, wrapped := p.Cursor, p.Cursor, false
	var now time.Time
	for range 10 {
		rows, at, next, err := s.claimOrderedOnce(ctx, db, p, cursor, buf)
		if err != nil || len(rows) > 0 {
			return rows, at, next, err
		}
		now, p.ClearWait = at, false
		switch {
		case next == nil && (start == nil || wrapped):
			return nil, now, nil, nil // swept every aggregate
		case next == nil:
			wrapped, cursor = true, nil // reached the end; the start was not seen yet
		case wrapped && *next >= *start:
			return nil, now, next, nil // back where this claim began
		default:
			cursor = next // stopped by the visit limit
		}
	}
	return nil, now, cursor, nil
}

func (s *Store) claimOrderedOnce(ctx context.Context, db DB, p ClaimParams, cursor *string, buf []Row) ([]Row, time.Time, *string, error) {
	// A fresh sweep starts at '' inclusive: no text sorts before it.
	after := ""
	if cursor != nil {
		after = *cursor
	}
	rows, err := db.Query(ctx, s.claimOrdered, ownerText(p.Owner), p.Batch, p.Lease.Microseconds(), p.MaxAttempts,
		p.ClearWait, after, cursor == nil, orderedMaxVisit(p.Batch), p.Expired.since())
	if err != nil {
		return nil, time.Time{}, nil, translate(err)
	}
	defer rows.Close()
	out := buf[:0]
	var now time.Time
	var next *string
	for rows.Next() {
		var (
			id                                          *int64
			aggregateType, aggregateID, eventType, body *string
			createdAt                                   *time.Time
			attempts                                    *int
			version                                     *int64
			headers, uid                                *string
		)
		if err := rows.Scan(&id, &aggregateType, &aggregateID, &eventType, &body,
			&createdAt, &attempts, &version, &headers, &uid, &now, &next); err != nil {
			return nil, time.Time{}, nil, translate(err)
		}
		if id == nil {
			continue // the row that only carries the cursor
		}
		r := Row{ID: *id, AggregateType: *aggregateType, AggregateID: *aggregateID, EventType: *eventType,
			Payload: []byte(*body), CreatedAt: *createdAt, Attempts: *attempts, LeaseVersion: *version}
		r.setHeaders(headers)
		r.setUID(uid)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, nil, translate(err)
	}
	sortRows(out)
	return out, now, next, nil
}

func sortRows(rows []Row) {
	// Insertion sort: batches are small and nearly sorted already.
	for i := 1; i < len(rows); i++ {
		for j := i; j > 0 && rows[j].ID < rows[j-1].ID; j-- {
			rows[j], rows[j-1] = rows[j-1], rows[j]
		}
	}
}

// Undelivered reports whether any row still awaits delivery (see
// undelivered.sql); with ordered, rows blocked behind a dead head do not count.
func (s *Store) Undelivered(ctx context.Context, db DB, ordered bool) (bool, error) {
	var any bool
	err := db.QueryRow(ctx, s.undelivered, ordered).Scan(&any)
	return any, translate(err)
}

// Blocked counts the aggregates whose oldest unfinished message is dead
// with messages pending behind it, and the messages so waiting; List has
// up to limit of them, the oldest dead head first.
type Blocked struct {
	Aggregates, Messages int64
	List                 []BlockedAggregate
}

// BlockedAggregate is one aggregate waiting behind its dead head.
type BlockedAggregate struct {
	AggregateID string `json:"aggregate_id"`
	DeadID      int64  `json:"dead_id"`
	Waiting     int64  `json:"waiting"`
}

// BlockedAggregates reads the aggregates blocked behind a dead head (see
// sql/blocked.sql).
func (s *Store) BlockedAggregates(ctx context.Context, db DB, limit int) (Blocked, error) {
	var b Blocked
	var list []byte
	if err := db.QueryRow(ctx, s.blocked, limit).Scan(&b.Aggregates, &b.Messages, &list); err != nil {
		return Blocked{}, translate(err)
	}
	return b, json.Unmarshal(list, &b.List)
}

// Lease names a lease this owner holds: a row and its fencing token.
type Lease struct {
	ID, Version int64
}

// Heartbeat extends the leases to now() + lease where they still hold, in
// one statement, and returns the set of leases extended.
func (s *Store) Heartbeat(ctx context.Context, db DB, owner string, leases []Lease, lease time.Duration) (map[Lease]bool, error) {
	ids := make([]int64, len(leases))
	versions := make([]int64, len(leases))
	for i, l := range leases {
		ids[i], versions[i] = l.ID, l.Version
	}
	rows, err := db.Query(ctx, s.heartbeat, ownerText(owner), ids, versions, lease.Microseconds())
	if err != nil {
		return nil, translate(err)
	}
	held := make(map[Lease]bool, len(leases))
	var l Lease
	if _, err := pgx.ForEachRow(rows, []any{&l.ID, &l.Version}, func() error { held[l] = true; return nil }); err != nil {
		return nil, translate(err)
	}
	return held, nil
}

// Wait records that owner is idle and listening for the next d; inserts
// notify while any owner waits.
func (s *Store) Wait(ctx context.Context, db DB, owner string, d time.Duration) error {
	_, err := db.Exec(ctx, s.wait, ownerText(owner), d.Microseconds())
	return translate(err)
}

// Unwait removes owner's waiter row.
func (s *Store) Unwait(ctx context.Context, db DB, owner string) error {
	_, err := db.Exec(ctx, s.unwait, ownerText(owner))
	return translate(err)
}

// translate maps driver errors to the store's sentinels, once, here.
// Translate maps driver errors to the store's sentinels; for callers that run
// store-built SQL themselves (producers).
func Translate(err error) error { return translate(err) }

func translate(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("%w: %s", ErrTableMissing, pgErr.Message)
	}
	return err
}
