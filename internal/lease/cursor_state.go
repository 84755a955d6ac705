package lease

import (
	"slices"

	"github.com/outboxd/outbox/internal/store"
)

// window is what a dispatcher knows of one shard's snapshot cursor, under
// the token it holds the shard with. It is plain data, guarded by the
// shard leases' mutex.
//
// Invariants: batches are in read order, each after the one before it in
// the shard's windows; done is the snapshot the cursor will stand at once
// every batch is advanced (the hi of the last closing batch read, or the
// stored done); while hi is set, the ids of the open window after `after`
// are ids (a prefix of them when more is set), and none of them was read.
type window struct {
	token int64
	// loaded: done is known (the shard was loaded once under this token).
	loaded bool
	done   string
	// origin is the origin done and hi were read on (store.Window).
	origin string
	// hi is the open window's snapshot ("" when none is open); after the
	// last id read of it.
	hi    string
	after int64
	ids   []int64
	more  bool
	// batches are the window batches read and not yet advanced.
	batches []*batch
	// stale: an advance of the shard was given up, and the shard is not
	// read until nothing of it is in flight, then loaded again from what
	// is stored.
	stale bool
}

// batch is the messages of one shard read together, whose outcomes are
// written at once: a window batch moves the cursor (to hi after last, or
// past the window when close is set) and parks its exceptions; a batch of
// parked messages (hi "") only writes their outcomes.
type batch struct {
	lease store.ShardLease
	// done is the lower bound of the batch's window, hi its snapshot;
	// origin is what they (or the parked messages) were read on.
	done   string
	hi     string
	origin string
	last   int64
	close  bool
	// The batch's messages: a window batch's ids, ascending, and their
	// entries at the same index (a search, not a map, finds them: a map
	// cost three hashed lookups per message); a batch of parked messages
	// keeps them in rows. open counts those not yet settled.
	ids     []int64
	entries []entry
	rows    map[int64]*entry
	open    int
	// parks are the writes the advance makes; writes the ids of the
	// verdicts it decides (each under the batch's token: Decide records
	// only those).
	parks  []store.Park
	writes []int64
	// dead: the shard's window was dropped (the shard lost, or its
	// advance given up); its writes are decided unheld without a
	// statement.
	dead bool
}

// entry is one message of a batch.
type entry struct {
	agg string
	// failed is its failed deliveries before this one; parked, whether it
	// was read from the parked table.
	failed  int
	parked  bool
	settled bool
}

func newBatch(l store.ShardLease, hi string) *batch {
	return &batch{lease: l, hi: hi}
}

// add puts a message read into the batch.
func (b *batch) add(r *store.Row, parked bool) {
	if b.rows == nil {
		b.rows = map[int64]*entry{}
	}
	b.rows[r.ID] = &entry{agg: r.AggregateID, failed: r.Attempts - 1, parked: parked}
	b.open++
}

// entry is message id's entry, nil when it is not the batch's.
func (b *batch) entry(id int64) *entry {
	if b.ids == nil {
		return b.rows[id]
	}
	if i, ok := slices.BinarySearch(b.ids, id); ok {
		return &b.entries[i]
	}
	return nil
}

// fetched fills in the entry of a message taken by id, once its row is
// read.
func (b *batch) fetched(r *store.Row) {
	if e := b.entry(r.ID); e != nil {
		e.agg, e.failed = r.AggregateID, r.Attempts-1
	}
}

// gone settles a message that has nothing to write: its row vanished from
// the table before it was fetched, or it was never handed out.
func (b *batch) gone(id int64) {
	if e := b.entry(id); e != nil && !e.settled {
		e.settled = true
		b.open--
	}
}

// complete reports whether every message of the batch is settled.
func (b *batch) complete() bool { return b.open == 0 }

// settle records the outcome of message id: nothing for a window message
// delivered, a cleared parked row for a parked one delivered, and a parked
// row for everything else (status "" is a message held back unpublished
// behind an earlier one of its aggregate: its attempt is refunded). It
// reports false when the message is not the batch's or was settled before.
func (b *batch) settle(id int64, w store.RowWrite) bool {
	e := b.entry(id)
	if e == nil || e.settled {
		return false
	}
	e.settled = true
	b.open--
	status, failed := w.Status, e.failed
	switch {
	case status == "":
		status, w.Delay, w.Error = store.StatusPending, 0, ""
	case !w.Refund:
		failed++
	}
	if status == store.StatusDone && !e.parked {
		return true
	}
	b.parks = append(b.parks, store.Park{
		ID: id, Shard: b.lease.Shard, AggregateID: e.agg, Status: status, Delay: w.Delay, Attempts: failed, Error: w.Error,
	})
	return true
}

// advance is the cursor move of a window batch.
func (b *batch) advance() store.Advance {
	return store.Advance{ShardLease: b.lease, Done: b.done, Hi: b.hi, Last: b.last, Close: b.close, Origin: b.origin}
}

// ready takes out of w the batches at its front that are complete: their
// cursor moves are made in read order, the last one standing for all.
func (w *window) ready() []*batch {
	n := 0
	for n < len(w.batches) && w.batches[n].complete() {
		n++
	}
	out := w.batches[:n:n]
	w.batches = w.batches[n:]
	return out
}

// take takes up to n ids of the open window into a batch under l. The
// batch closes the window when it takes its last id.
func (w *window) take(l store.ShardLease, n int) (*batch, []int64) {
	n = min(n, len(w.ids))
	ids := w.ids[:n:n]
	w.ids = w.ids[n:]
	b := newBatch(l, w.hi)
	b.done, b.origin = w.done, w.origin
	b.entries = make([]entry, len(ids))
	if slices.IsSorted(ids) { // as a load returns them
		b.ids = ids
	} else {
		b.rows = make(map[int64]*entry, len(ids))
		for i, id := range ids {
			b.rows[id] = &b.entries[i]
		}
	}
	b.writes = make([]int64, 0, len(ids))
	b.open = len(ids)
	b.last = ids[len(ids)-1]
	w.after = b.last
	if len(w.ids) == 0 && !w.more {
		b.close = true
		w.done, w.hi, w.after = w.hi, "", 0
	}
	w.batches = append(w.batches, b)
	return b, ids
}

// loaded applies a load of the shard's window. A window that turns out
// empty after rows of it were read (or read by an earlier owner) is
// closed by an empty batch, returned; a new window that is empty is
// dropped: nothing is to be written.
func (w *window) load(l store.ShardLease, got store.Window, limit int) *batch {
	w.loaded, w.done, w.hi, w.after, w.origin = true, got.Done, got.Hi, got.After, got.Origin
	w.ids, w.more = got.IDs, len(got.IDs) >= limit
	if len(w.ids) > 0 {
		return nil
	}
	if !got.Resumed {
		w.hi, w.after = "", 0
		return nil
	}
	b := newBatch(l, w.hi)
	b.done, b.last, b.close, b.origin = w.done, w.after, true, w.origin
	w.done, w.hi, w.after = w.hi, "", 0
	w.batches = append(w.batches, b)
	return b
}

// plan is what a window needs before its next read: a load (of a new
// window, of more of the open one, or of what is stored), or nothing (it
// has ids to take, or is stale).
func (w *window) plan(l store.ShardLease) (store.WindowLoad, bool) {
	switch {
	case w.stale || len(w.ids) > 0:
		return store.WindowLoad{}, false
	case !w.loaded:
		return store.WindowLoad{ShardLease: l}, true
	case w.hi != "":
		return store.WindowLoad{ShardLease: l, Done: w.done, Hi: w.hi, After: w.after, Origin: w.origin}, true
	}
	return store.WindowLoad{ShardLease: l, Done: w.done, Origin: w.origin}, true
}

// fill splits room among shards that have n[i] ids each: as much as it
// can take of one shard after another, from the shard at turn (modulo
// their number) on. Each shard whose batch goes out costs one version of
// its row when the batch is written, and under a held snapshot none of
// them can be removed, so a read takes few shards' batches, not a sliver
// of each; turn rotates which shards go first.
func fill(room int, n []int, turn int) []int {
	out := make([]int, len(n))
	for k := range n {
		if room == 0 {
			break
		}
		i := (turn + k) % len(n)
		out[i] = min(n[i], room)
		room -= out[i]
	}
	return out
}
