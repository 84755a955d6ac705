package lease

import (
	"slices"

	"github.com/outboxd/outbox/internal/store"
)

// membership is the shards a dispatcher holds. It is plain data: the
// shard leases guard it with their mutex and do its I/O.
//
// Invariant: every shard of isolated is a shard of held (a shard lost or
// given back is no longer isolated: its new owner isolates it if need be).
type membership struct {
	held map[int]int64 // shard → token
	// isolated maps each shard delivered one message at a time to the
	// id up to which it is: the last message its previous owner, which
	// died holding it, can have had in flight.
	isolated map[int]int64
}

func newMembership() membership {
	return membership{held: map[int]int64{}, isolated: map[int]int64{}}
}

// sorted is the shards held, in order.
func (m *membership) sorted() []int {
	shards := make([]int, 0, len(m.held))
	for shard := range m.held {
		shards = append(shards, shard)
	}
	slices.Sort(shards)
	return shards
}

// holds reports whether shard is held under token.
func (m *membership) holds(shard int, token int64) bool {
	t, ok := m.held[shard]
	return ok && t == token
}

// renewed replaces the shards held by those a renewal found.
func (m *membership) renewed(held []store.ShardLease) {
	m.held = make(map[int]int64, len(held))
	for _, l := range held {
		m.held[l.Shard] = l.Token
	}
	for shard := range m.isolated {
		if _, ok := m.held[shard]; !ok {
			delete(m.isolated, shard)
		}
	}
}

// take records a shard just acquired.
func (m *membership) take(a store.AcquiredShard) {
	m.held[a.Shard] = a.Token
	if a.IsolateThrough != nil {
		m.isolated[a.Shard] = *a.IsolateThrough
	}
}

// drop forgets shards given back.
func (m *membership) drop(leases []store.ShardLease) {
	for _, l := range leases {
		delete(m.held, l.Shard)
		delete(m.isolated, l.Shard)
	}
}

// leases is every shard held with its token, in shard order.
func (m *membership) leases() []store.ShardLease {
	out := make([]store.ShardLease, 0, len(m.held))
	for _, shard := range m.sorted() {
		out = append(out, store.ShardLease{Shard: shard, Token: m.held[shard]})
	}
	return out
}

// extras are the held shards beyond share with nothing in flight (busy),
// highest first: what balancing gives back.
func (m *membership) extras(share int, busy map[int]bool) []store.ShardLease {
	var out []store.ShardLease
	shards := m.sorted()
	for i := len(shards) - 1; i >= 0 && len(m.held)-len(out) > share; i-- {
		if !busy[shards[i]] {
			out = append(out, store.ShardLease{Shard: shards[i], Token: m.held[shards[i]]})
		}
	}
	return out
}

// fairShare is one dispatcher's share of count shards among alive
// dispatchers: rounded up, so that every shard is someone's share.
func fairShare(count, alive int) int {
	if alive < 1 {
		alive = 1
	}
	return (count + alive - 1) / alive
}

// isolation decides, for the isolated shards read with their next message
// each (read, at most one per shard), what the shard row is to declare
// before any of them goes out, and which rows then go out (at most
// batch). A shard whose next message lies beyond isolate_through, or that
// has none due, ends its isolation (ended): that message cannot have been
// in flight when the owner died.
func (m *membership) isolation(shards []int, tokens map[int]int64, read []store.Row, batch int) (writes []store.Isolation, rows []store.Row, ended map[int]bool) {
	byShard := make(map[int]store.Row, len(read))
	for _, r := range read {
		byShard[r.Shard] = r
	}
	ended = map[int]bool{}
	for _, shard := range shards {
		r, ok := byShard[shard]
		l := store.ShardLease{Shard: shard, Token: tokens[shard]}
		switch {
		case !ok || r.ID > m.isolated[shard]:
			writes, ended[shard] = append(writes, store.Isolation{ShardLease: l}), true
			if ok && len(rows) < batch {
				rows = append(rows, r)
			}
		case len(rows) < batch:
			writes, rows = append(writes, store.Isolation{ShardLease: l, ID: &r.ID}), append(rows, r)
		}
	}
	return writes, rows, ended
}

// isolatedWritten ends the isolation of the shards ended whose declaration was
// written.
func (m *membership) isolatedWritten(written []int, ended map[int]bool) {
	for _, shard := range written {
		if ended[shard] {
			delete(m.isolated, shard)
		}
	}
}

// flight is the messages a dispatcher has read from its shards and not yet
// settled: pending in the table, so a read must not return them again. It
// is plain data, guarded like membership.
//
// Invariants: every id of hung is in flight under the token it hung under;
// a shard is abandoned while it has a hung message in flight, and is given
// up (released, its ids forgotten, hung ones included) once nothing else
// of it is.
type flight struct {
	ids  map[int64]store.ShardLease // id → its shard and the token it was read under
	aggs map[int64]string           // id → its aggregate (ordered only)
	// hung are the ids whose publish hung past its timeout, with the
	// token of that publish (a message given up with its shard is read
	// again, under a new token, while the hung publish may still run);
	// abandoned their shards, read no more until given up.
	hung      map[int64]int64
	abandoned map[int]bool
}

// newFlight returns an empty flight; ordered, it keeps each message's
// aggregate (only ordered reads ask for it).
func newFlight(ordered bool) flight {
	f := flight{ids: map[int64]store.ShardLease{}, hung: map[int64]int64{}, abandoned: map[int]bool{}}
	if ordered {
		f.aggs = map[int64]string{}
	}
	return f
}

// add records a message read under l, of aggregate agg.
func (f *flight) add(id int64, l store.ShardLease, agg string) {
	f.ids[id] = l
	if f.aggs != nil {
		f.aggs[id] = agg
	}
}

// busy is the set of shards with a message in flight.
func (f *flight) busy() map[int]bool {
	busy := map[int]bool{}
	for _, l := range f.ids {
		busy[l.Shard] = true
	}
	return busy
}

// exclude lists the ids in flight, for the read to skip.
func (f *flight) exclude() []int64 {
	out := make([]int64, 0, len(f.ids))
	for id := range f.ids {
		out = append(out, id)
	}
	return out
}

// of is the shard lease id was read under, if it is in flight.
func (f *flight) of(id int64) (store.ShardLease, bool) {
	l, ok := f.ids[id]
	return l, ok
}

// settle forgets the ids of a finalized batch (written or not: a row left
// pending is read again). A hung publish given up may end after its row
// was read again: its verdict must not forget the new read.
func (f *flight) settle(writes []store.RowWrite) {
	for _, w := range writes {
		if l, ok := f.ids[w.ID]; ok && l.Token == w.LeaseVersion {
			delete(f.ids, w.ID)
			delete(f.aggs, w.ID)
		}
		if t, ok := f.hung[w.ID]; ok && t == w.LeaseVersion {
			delete(f.hung, w.ID)
		}
	}
}

// markHung records publishes found hung, and abandons their shards.
func (f *flight) markHung(leases []store.Lease) {
	for _, l := range leases {
		if r, ok := f.ids[l.ID]; ok && r.Token == l.Version {
			f.hung[l.ID], f.abandoned[r.Shard] = l.Version, true
		}
	}
}

// giveUp returns the abandoned shards with nothing but hung publishes in
// flight, in order, and forgets them and their ids: whoever takes such a
// shard next reads those messages again.
func (f *flight) giveUp() []int {
	var out []int
	for shard := range f.abandoned {
		if f.onlyHung(shard) {
			out = append(out, shard)
		}
	}
	slices.Sort(out)
	for _, shard := range out {
		delete(f.abandoned, shard)
		for id, r := range f.ids {
			if r.Shard == shard {
				delete(f.ids, id)
				delete(f.aggs, id)
				delete(f.hung, id)
			}
		}
	}
	return out
}

// onlyHung reports whether every message of shard in flight is hung.
func (f *flight) onlyHung(shard int) bool {
	for id, r := range f.ids {
		if t, hung := f.hung[id]; r.Shard == shard && (!hung || t != r.Token) {
			return false
		}
	}
	return true
}

// readPlan splits the held shards into those read normally and the
// isolated ones free to deliver their next message (none of theirs in
// flight); abandoned shards are not read. tokens is each held shard's
// token: the rows read are delivered under it.
func readPlan(m *membership, f *flight) (plain, isolated []int, tokens map[int]int64) {
	tokens = make(map[int]int64, len(m.held))
	busy := f.busy()
	for _, shard := range m.sorted() {
		tokens[shard] = m.held[shard]
		if f.abandoned[shard] {
			continue
		}
		if _, ok := m.isolated[shard]; !ok {
			plain = append(plain, shard)
		} else if !busy[shard] {
			isolated = append(isolated, shard)
		}
	}
	return plain, isolated, tokens
}
