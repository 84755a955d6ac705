package store

import (
	"context"
)

// ShardRow is a pending row read under a shard lease.
type ShardRow struct {
	Row
	Shard int
}

// ReadShards returns up to perShard pending rows of each shard, oldest
// first, skipping the ids in inFlight. It locks and writes nothing.
func (s *Store) ReadShards(ctx context.Context, db DB, shards []int, inFlight []int64, perShard int) ([]ShardRow, error) {
	ids := make([]int32, len(shards))
	for i, n := range shards {
		ids[i] = int32(n)
	}
	if inFlight == nil {
		inFlight = []int64{}
	}
	rows, err := db.Query(ctx, s.shards.read, ids, inFlight, perShard)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []ShardRow
	for rows.Next() {
		var r ShardRow
		var payload string
		var headers *string
		var now any
		if err := rows.Scan(&r.ID, &r.AggregateType, &r.AggregateID, &r.EventType, &payload,
			&r.CreatedAt, &r.Attempts, &headers, &r.Shard, &now); err != nil {
			return nil, translate(err)
		}
		r.Payload = []byte(payload)
		r.setHeaders(headers)
		out = append(out, r)
	}
	return out, translate(rows.Err())
}

// ShardWrite is one row's outcome under a shard lease. Done rows are the
// happy path; the others are the exceptions, which also count an attempt
// (Attempts) where the outcome was a failed publish.
type ShardWrite struct {
	ID       int64
	Shard    int
	Status   string
	Delay    int64 // microseconds, pending only
	Attempts int
	Error    string
}

// FinalizeShards writes outcomes in one statement, fenced on each shard's
// token (see sql/shard_finalize.sql); it returns per write whether it was
// made. A write of a shard no longer held, or of a row no longer pending,
// is not.
func (s *Store) FinalizeShards(ctx context.Context, db DB, owner string, leases []ShardLease, writes []ShardWrite) ([]bool, error) {
	shards, tokens := splitLeases(leases)
	n := len(writes)
	ids, statuses, delays := make([]int64, n), make([]string, n), make([]int64, n)
	attempts, errs := make([]int32, n), make([]string, n)
	for i, w := range writes {
		ids[i], statuses[i], delays[i], attempts[i], errs[i] = w.ID, w.Status, w.Delay, int32(w.Attempts), storable(w.Error, maxErrorText)
	}
	rows, err := db.Query(ctx, s.shards.finalize, ownerText(owner), shards, tokens, ids, statuses, delays, attempts, errs)
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	written := make(map[int64]bool, n)
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, translate(err)
		}
		written[id] = true
	}
	out := make([]bool, n)
	for i, w := range writes {
		out[i] = written[w.ID]
	}
	return out, translate(rows.Err())
}
