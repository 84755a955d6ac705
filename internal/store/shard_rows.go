package store

import (
	"context"
	"time"
)

// ShardRead is one shard to read: held under Token, after the position
// After (0: from the front), up to Limit rows.
type ShardRead struct {
	ShardLease
	After int64
	Limit int
}

// ShardReadParams is one read of held shards (see ReadShards).
type ShardReadParams struct {
	Owner string
	Reads []ShardRead
	// InFlight are ids not to return (in flight above a position that is
	// behind); Waiting, aggregates none of whose rows to return.
	InFlight []int64
	Waiting  []string
	// Ordered returns each row with the previous unfinished row of its
	// aggregate (Row.Prev) and skips the rows whose previous one is dead
	// or not due; with HeadsOnly too, every row with an earlier unfinished
	// one. Unordered, a row's aggregate is not looked at.
	Ordered   bool
	HeadsOnly bool
}

// ReadShards returns, per shard, up to its limit of pending rows after its
// position, oldest first, skipping what p excludes (sql/shard_read.sql).
// It locks and writes nothing, and reads only the shards p.Owner still
// holds under the tokens given. Each row's Attempts is the delivery about
// to be made (failures so far plus one), its Shard and, ordered, Prev
// set; LeaseVersion is left for the caller (the shard's token).
func (s *Store) ReadShards(ctx context.Context, db DB, p ShardReadParams) ([]Row, time.Time, error) {
	n := len(p.Reads)
	shards, tokens, afters, limits := make([]int32, n), make([]int64, n), make([]int64, n), make([]int32, n)
	for i, r := range p.Reads {
		shards[i], tokens[i], afters[i], limits[i] = int32(r.Shard), r.Token, r.After, int32(r.Limit)
	}
	inFlight, waiting := p.InFlight, p.Waiting
	if inFlight == nil {
		inFlight = []int64{}
	}
	if waiting == nil {
		waiting = []string{}
	}
	rows, err := db.Query(ctx, s.shards.read, shards, tokens, afters, limits, ownerText(p.Owner), inFlight, waiting, p.HeadsOnly, p.Ordered)
	if err != nil {
		return nil, time.Time{}, translate(err)
	}
	defer rows.Close()
	var out []Row
	var now time.Time
	for rows.Next() {
		var r Row
		var payload string
		var headers, uid *string
		var prev *int64
		if err := rows.Scan(&r.ID, &r.AggregateType, &r.AggregateID, &r.EventType, &payload,
			&r.CreatedAt, &r.Attempts, &headers, &uid, &r.Shard, &now, &prev); err != nil {
			return nil, time.Time{}, translate(err)
		}
		r.Attempts++
		r.Payload = []byte(payload)
		r.setHeaders(headers)
		r.setUID(uid)
		if prev != nil {
			r.Prev = *prev
		}
		out = append(out, r)
	}
	return out, now, translate(rows.Err())
}

// FinalizeShards writes outcomes in one statement, fenced on each shard's
// token (each write's Shard and LeaseVersion; see sql/shard_finalize.sql),
// and returns per write whether it was made. A write of a shard no longer
// held, or of a row no longer pending, is not. Every write counts its
// delivery in attempts (a done one too, as a claim does under row leases)
// unless Refund is set, and stamps the shard's token as lease_version.
func (s *Store) FinalizeShards(ctx context.Context, db DB, owner string, writes []RowWrite) ([]bool, error) {
	n := len(writes)
	ids, statuses, delays := make([]int64, n), make([]string, n), make([]int64, n)
	attempts, errs, borns, rowShards := make([]int32, n), make([]string, n), make([]*time.Time, n), make([]int32, n)
	seen := map[ShardLease]bool{}
	var leases []ShardLease
	for i, w := range writes {
		ids[i], statuses[i], delays[i], errs[i] = w.ID, w.Status, w.Delay.Microseconds(), storable(w.Error, maxErrorText)
		borns[i], rowShards[i] = w.born(), int32(w.Shard)
		if !w.Refund {
			attempts[i] = 1
		}
		if l := (ShardLease{Shard: w.Shard, Token: w.LeaseVersion}); !seen[l] {
			seen[l] = true
			leases = append(leases, l)
		}
	}
	shards, tokens := splitLeases(leases)
	rows, err := db.Query(ctx, s.shards.finalize, ownerText(owner), shards, tokens, ids, statuses, delays, attempts, errs, borns, rowShards)
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
