package store

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// MaxShards bounds a table's shard count: each shard is a row every
// dispatcher's lease statements touch.
const MaxShards = 4096

// shardSQL are the shard-lease statements (docs/shard-leases.md).
type shardSQL struct {
	exists, count, renew, acquire, release, read, finalize, requeue string
	leave, look, isolate, status, owners                            string
}

func loadShards(load func(string) string) shardSQL {
	return shardSQL{
		exists:   load("sql/shard_exists.sql"),
		count:    load("sql/shard_count.sql"),
		renew:    load("sql/shard_renew.sql"),
		acquire:  load("sql/shard_acquire.sql"),
		release:  load("sql/shard_release.sql"),
		read:     load("sql/shard_read.sql"),
		finalize: load("sql/shard_finalize.sql"),
		requeue:  load("sql/shard_requeue.sql"),
		leave:    load("sql/shard_leave.sql"),
		look:     load("sql/shard_look.sql"),
		isolate:  load("sql/shard_isolate.sql"),
		status:   load("sql/shard_status.sql"),
		owners:   load("sql/shard_owners.sql"),
	}
}

// EnableShards prepares the table for shard leases with n shards: the
// shard and members tables, the shard column and its insert trigger, and
// the index of pending rows per shard. Unfinished rows get their shard.
// Enabling again with the same n is a no-op; another n is refused, since
// every stored shard number depends on it.
func (s *Store) EnableShards(ctx context.Context, db pgx.Tx, n int) error {
	if n < 1 || n > MaxShards {
		return fmt.Errorf("shard count must be 1 to %d, got %d", MaxShards, n)
	}
	if err := LockMigrationTx(ctx, db, s.Table.String(), nil); err != nil {
		return err
	}
	have, err := s.ShardCount(ctx, db)
	if err != nil {
		return err
	}
	if have != 0 && have != n {
		return fmt.Errorf("table %s already has %d shards; changing the count is not supported", s.Table, have)
	}
	tag := dollarTag(s.Table.String())
	sql := strings.NewReplacer("{{shard_count}}", strconv.Itoa(n), "{{tag}}", tag).
		Replace(s.Table.replacer().Replace(rawSQL("sql/shard_enable.sql")))
	if _, err = db.Exec(ctx, sql); err != nil {
		return translate(err)
	}
	return s.applySteps(ctx, db, "007_shard_fill")
}

// applySteps runs, in tx, the DDL of every step of the migration file: the
// part of setting a mode up that a migration also brings tables set up by
// an earlier version to. Its steps build no index.
func (s *Store) applySteps(ctx context.Context, tx pgx.Tx, file string) error {
	p := &migrationPlan{store: s}
	for _, st := range migrationSteps() {
		if st.Migration != file {
			continue
		}
		if _, err := tx.Exec(ctx, p.render(st.apply), pgx.QueryExecModeSimpleProtocol); err != nil {
			return stepError(st, err)
		}
	}
	return nil
}

// ShardCount is the table's number of shards, 0 when shard leases are not
// enabled.
func (s *Store) ShardCount(ctx context.Context, db DB) (int, error) {
	shape, err := s.shape(ctx, db)
	if err != nil || !shape.shards {
		return 0, err
	}
	var n int
	err = db.QueryRow(ctx, s.shards.count).Scan(&n)
	return n, translate(err)
}

// ShardsCurrent reports whether the table's shard table has every column
// this version's statements use (a table without shards is current).
func (s *Store) ShardsCurrent(ctx context.Context, db DB) (bool, error) {
	shape, err := s.shape(ctx, db)
	return !shape.shards || shape.current, err
}

// tableShape is which lease modes a table is set up for: shards (current:
// with every column this version's statements use) and snapshot cursors.
type tableShape struct {
	shards, current, cursors bool
}

// shape reads the table's shape from the catalog, in one statement.
func (s *Store) shape(ctx context.Context, db DB) (tableShape, error) {
	var t tableShape
	err := db.QueryRow(ctx, s.shards.exists, s.Table.ident(suffixShards), s.Table.ident(suffixShardMembers), s.Table.ident(suffixParked)).
		Scan(&t.shards, &t.current, &t.cursors)
	return t, translate(err)
}

// shardFigures are what shard-lease dispatchers report for status: the
// messages in flight (pending in the table) and the shard leases that ran
// out; zero when the table has no current shards.
func (s *Store) shardFigures(ctx context.Context, db DB, shape tableShape) (inFlight, expired int64, err error) {
	if !shape.shards || !shape.current {
		return 0, 0, nil
	}
	err = db.QueryRow(ctx, s.shards.status).Scan(&inFlight, &expired)
	return inFlight, expired, translate(err)
}

// ShardLease is one shard held: its number and fencing token.
type ShardLease struct {
	Shard int
	Token int64
}

// RenewShards marks owner alive with inFlight messages in flight, extends
// the leases it still holds and returns them with the number of dispatchers alive, owner included.
func (s *Store) RenewShards(ctx context.Context, db DB, owner string, lease time.Duration, inFlight int) ([]ShardLease, int, error) {
	rows, err := db.Query(ctx, s.shards.renew, ownerText(owner), lease.Microseconds(), inFlight)
	if err != nil {
		return nil, 0, translate(err)
	}
	defer rows.Close()
	var held []ShardLease
	alive := 1
	for rows.Next() {
		var l ShardLease
		if err := rows.Scan(&l.Shard, &l.Token, &alive); err != nil {
			return nil, 0, translate(err)
		}
		if l.Shard >= 0 {
			held = append(held, l)
		}
	}
	return held, alive, translate(rows.Err())
}

// AcquiredShard is a shard just taken. Taken from an owner that died
// while delivering a message alone (StrikeID set), that message was
// charged the crash: Strikes is how many owners died so, Attempts its
// attempts now. IsolateThrough, when set, is the id up to which the shard
// is to be delivered one message at a time.
type AcquiredShard struct {
	ShardLease
	StrikeID       *int64
	Strikes        int
	IsolateThrough *int64
	Attempts       *int
}

// AcquireShards takes up to n shards that are free or whose lease ran out;
// window is how many messages an owner may hold in flight in one shard
// (see sql/shard_acquire.sql).
func (s *Store) AcquireShards(ctx context.Context, db DB, owner string, lease time.Duration, n, window int) ([]AcquiredShard, error) {
	rows, err := db.Query(ctx, s.shards.acquire, ownerText(owner), lease.Microseconds(), n, window)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AcquiredShard, error) {
		var a AcquiredShard
		err := r.Scan(&a.Shard, &a.Token, &a.StrikeID, &a.Strikes, &a.IsolateThrough, &a.Attempts)
		return a, err
	})
	return out, translate(err)
}

// Isolation is one shard's isolation write: ID declares the message about
// to be delivered alone, nil ends the shard's isolation.
type Isolation struct {
	ShardLease
	ID *int64
}

// Isolate writes isolation bookkeeping (sql/shard_isolate.sql) and returns
// the shards written: one missing was lost.
func (s *Store) Isolate(ctx context.Context, db DB, owner string, isolations []Isolation) ([]int, error) {
	shards, tokens, ids := make([]int32, len(isolations)), make([]int64, len(isolations)), make([]*int64, len(isolations))
	for i, x := range isolations {
		shards[i], tokens[i], ids[i] = int32(x.Shard), x.Token, x.ID
	}
	rows, err := db.Query(ctx, s.shards.isolate, ownerText(owner), shards, tokens, ids)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	return out, translate(err)
}

// ReleaseShards gives up the leases; it returns the shards released (a
// lease already taken over is not).
func (s *Store) ReleaseShards(ctx context.Context, db DB, owner string, leases []ShardLease) ([]int, error) {
	shards, tokens := splitLeases(leases)
	rows, err := db.Query(ctx, s.shards.release, ownerText(owner), shards, tokens)
	if err != nil {
		return nil, translate(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	return out, translate(err)
}

// LeaveShards drops owner's membership, so the others stop counting it as
// alive and their share of the shards grows at once, and frees every shard
// still held under owner's name (see sql/shard_leave.sql).
func (s *Store) LeaveShards(ctx context.Context, db DB, owner string) error {
	_, err := db.Exec(ctx, s.shards.leave, ownerText(owner))
	return translate(err)
}

// LookShards counts the shards no live lease holds and the dispatchers
// alive, owner included (as RenewShards does, without writing).
func (s *Store) LookShards(ctx context.Context, db DB, owner string, lease time.Duration) (free, alive int, err error) {
	err = db.QueryRow(ctx, s.shards.look, ownerText(owner), lease.Microseconds()).Scan(&free, &alive)
	return free, alive, translate(err)
}

func splitLeases(leases []ShardLease) ([]int32, []int64) {
	shards, tokens := make([]int32, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		shards[i], tokens[i] = int32(l.Shard), l.Token
	}
	return shards, tokens
}

// RequeueExpiredRows puts back to pending the rows of these shards that a
// row-lease dispatcher left processing with an expired lease, and returns
// how many.
func (s *Store) RequeueExpiredRows(ctx context.Context, db DB, shards []int) (int64, error) {
	ids := make([]int32, len(shards))
	for i, n := range shards {
		ids[i] = int32(n)
	}
	tag, err := db.Exec(ctx, s.shards.requeue, ids)
	return tag.RowsAffected(), translate(err)
}
