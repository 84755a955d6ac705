package lease

import (
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// cursor is where a dispatcher reads one of its shards from. It is plain
// data, guarded like membership.
//
// A read starts lookback ids behind pos, the highest id read of the shard
// under its token, so it does not walk the rows in flight (pending in the
// table until their finalize) but for the last few. A row can commit after
// a read that passed its id (its transaction took the id, then committed
// after another that took a higher one): just behind pos, the next read
// finds it; further behind, a sweep does, a read from the front that skips
// the ids in flight, walks the shard to its end a prefix at a time, and
// starts at least once per poll interval, when the fetcher wakes on a
// notification or registers as a waiter (a commit it may have missed), and
// when a row of the shard written back pending (a retry, a defer, a
// release) is due again. A pending row with an id below pos that is not in
// flight is therefore read again at most a poll interval after it became
// visible or due.
type cursor struct {
	// token is the lease the positions belong to; a shard held under a
	// new token is read from the front.
	token int64
	pos   int64
	// sweeping is set while a sweep is under way; sweep is how far it got.
	sweeping bool
	sweep    int64
	// sweepAt is when the next sweep is due.
	sweepAt time.Time
}

// cursors are the read positions of the shards held.
type cursors map[int]*cursor

// plan returns, for each shard, the position its read starts after, and
// the ids in flight (or read earlier in the same claim: read, not yet in
// flight) above those positions, which the read is to skip. Sweeps start
// only when start is set (the first read of a claim): on the shards whose
// sweep is due, on every shard when all is set (a notification woke the
// fetcher).
func (cs cursors) plan(shards []int, tokens map[int]int64, f *flight, read []store.Row, now time.Time, poll time.Duration, start, all bool) (after map[int]int64, exclude []int64) {
	after = make(map[int]int64, len(shards))
	for _, shard := range shards {
		c := cs[shard]
		if c == nil || c.token != tokens[shard] {
			c = &cursor{token: tokens[shard], sweepAt: now.Add(poll)}
			cs[shard] = c
		}
		if start && !c.sweeping && (all || !now.Before(c.sweepAt)) {
			c.sweeping, c.sweep, c.sweepAt = true, 0, now.Add(poll)
		}
		after[shard] = c.from()
	}
	for id, l := range f.ids {
		if a, ok := after[l.Shard]; ok && id > a {
			exclude = append(exclude, id)
		}
	}
	for _, r := range read {
		if a, ok := after[r.Shard]; ok && r.ID > a {
			exclude = append(exclude, r.ID)
		}
	}
	return after, exclude
}

// lookback is how far behind its position a read of a shard starts, in
// ids: a producer transaction that commits a little after others that took
// later ids (concurrent producers do, all the time) leaves its row just
// below the position, and the next read finds it. The rows in flight in
// that range are skipped by id; a row further behind waits for a sweep.
const lookback = 256

func (c *cursor) from() int64 {
	if c.sweeping {
		return c.sweep
	}
	return max(c.pos-lookback, 0)
}

// advance moves the cursor of a shard read from after past the n rows
// kept of the read (the highest last); more reports that the read filled
// its limit, so a sweep has not reached the shard's end.
func (c *cursor) advance(after int64, more bool, n int, last int64) {
	if c.from() != after {
		return // restarted meanwhile (the shard changed hands)
	}
	if n > 0 {
		c.pos = max(c.pos, last)
	}
	if !c.sweeping {
		return
	}
	c.sweep = max(c.sweep, last)
	if !more || c.sweep >= c.pos {
		c.sweeping = false
	}
}

// due brings a shard's next sweep forward to at: a row of it written back
// pending is due again then.
func (cs cursors) due(shard int, at time.Time) {
	if c := cs[shard]; c != nil && at.Before(c.sweepAt) {
		c.sweepAt = at
	}
}

// forget drops the cursors of shards no longer held.
func (cs cursors) forget(held map[int]int64) {
	for shard, c := range cs {
		if t, ok := held[shard]; !ok || t != c.token {
			delete(cs, shard)
		}
	}
}

// reads builds the reads of shards, each after its position, limit rows.
func reads(shards []int, tokens map[int]int64, after map[int]int64, limit int) []store.ShardRead {
	out := make([]store.ShardRead, len(shards))
	for i, shard := range shards {
		out[i] = store.ShardRead{ShardLease: store.ShardLease{Shard: shard, Token: tokens[shard]}, After: after[shard], Limit: limit}
	}
	return out
}

// waiting are the aggregates a read skips, each until a time: one of their
// messages was written back pending until then, or went dead, or could not
// go out (see shardLeases.Settled).
type waiting map[string]time.Time

// until makes agg wait until at, or longer if it already does.
func (w waiting) until(agg string, at time.Time) {
	if at.After(w[agg]) {
		w[agg] = at
	}
}

// list is the aggregates still waiting at now; it forgets the others.
func (w waiting) list(now time.Time) []string {
	var out []string
	for agg, until := range w {
		if now.Before(until) {
			out = append(out, agg)
		} else {
			delete(w, agg)
		}
	}
	return out
}
