package outbox

import (
	"sync"
	"sync/atomic"

	"github.com/outboxd/outbox/internal/store"
)

// chains deliver each aggregate's messages one after another when the lease
// mode claims messages of an aggregate whose earlier ones are still in
// flight (lease.Mode.Chained: shard leases read a prefix of each shard).
// The fetcher admits a claimed row only once the row before it (its Prev)
// is in flight here or was just written done; the first row of an
// aggregate goes to the workers, the others queue behind it, and the worker
// that publishes one takes the next as soon as the sink acknowledged it,
// with no database round trip between them. A message that is not
// delivered (a retry, a defer, a dead one, a release) breaks its chain: the
// messages queued behind it are released unpublished, and rows of the
// aggregate read until everything of the chain is settled are not admitted.
// They stay pending behind the one that failed and are read again once it
// is due (the read skips an aggregate whose head is not).
type chains struct {
	mu   sync.Mutex
	aggs map[string]*chain
	// ids maps each admitted id, until its verdict is settled, to its
	// aggregate.
	ids map[int64]string
	// done and doneBefore are the ids settled written done since the last
	// two reads began: a read that began before such a finalize committed
	// names the row as the next one's Prev, and the next row may go.
	done, doneBefore map[int64]bool
	// orphans are messages that waited behind a hung publish, for the
	// fetcher to hand to the workers, which release them.
	orphans []*claimed
	// working counts the messages handed to the workers that they have
	// not finished with (a message's chain followed to its end); idle
	// fires when it falls to zero. Only a running publish can be found
	// hung, so once the fetcher stopped no orphan comes after that.
	working atomic.Int64
	idle    chan struct{}
}

// chain is one aggregate's messages in the dispatcher.
type chain struct {
	members int // admitted, not yet settled
	running bool
	broken  bool
	queue   []*claimed
}

func newChains() *chains {
	return &chains{aggs: map[string]*chain{}, ids: map[int64]string{}, done: map[int64]bool{}, doneBefore: map[int64]bool{},
		idle: make(chan struct{}, 1)}
}

// reading marks the start of a read.
func (cs *chains) reading() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	clear(cs.doneBefore)
	cs.done, cs.doneBefore = cs.doneBefore, cs.done
}

// admit splits the rows of a read, in id order per aggregate, into those to
// deliver and those whose aggregate must wait: the row before them is
// neither in flight here nor done (it is dead, waiting for a retry, or not
// read yet), or their chain is broken.
func (cs *chains) admit(rows []store.Row) (kept, dropped []store.Row) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	kept = rows[:0:0]
	for _, r := range rows {
		ch := cs.aggs[r.AggregateID]
		_, inFlight := cs.ids[r.Prev]
		ready := r.Prev == 0 || inFlight || cs.done[r.Prev] || cs.doneBefore[r.Prev]
		if !ready || ch != nil && ch.broken {
			dropped = append(dropped, r)
			continue
		}
		if ch == nil {
			ch = &chain{}
			cs.aggs[r.AggregateID] = ch
		}
		ch.members++
		cs.ids[r.ID] = r.AggregateID
		kept = append(kept, r)
	}
	return kept, dropped
}

// start reports whether c goes to the workers now: it is the first of its
// chain, or its chain broke since c was admitted (c is then marked to be
// released unpublished). Otherwise it waits in its chain's queue.
func (cs *chains) start(c *claimed) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ch := cs.aggs[c.agg]
	c.chain = ch
	switch {
	case ch.broken:
		c.dropped = true
		return true
	case ch.running:
		ch.queue = append(ch.queue, c)
		return false
	}
	ch.running = true
	return true
}

// next is what the worker that published c takes on: the next message of
// its aggregate if c was delivered; otherwise none, and the queued
// messages, which are released unpublished.
func (cs *chains) next(c *claimed, delivered bool) (next *claimed, released []*claimed) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	ch := c.chain
	if !delivered || ch.broken {
		ch.broken, ch.running = true, false
		released, ch.queue = ch.queue, nil
		return nil, released
	}
	if len(ch.queue) == 0 {
		ch.running = false
		return nil, nil
	}
	next, ch.queue = ch.queue[0], ch.queue[1:]
	return next, nil
}

// settled forgets the messages of a finalized batch; held is per verdict
// whether its write held (nil: the finalize gave up).
func (cs *chains) settled(batch []verdict, held []bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for i := range batch {
		id := batch[i].claim.msg.ID
		agg, ok := cs.ids[id]
		if !ok {
			continue
		}
		delete(cs.ids, id)
		if ch := cs.aggs[agg]; ch != nil {
			if ch.members--; ch.members == 0 {
				delete(cs.aggs, agg)
			}
		}
		if held != nil && held[i] && batch[i].outcome == OutcomeDone {
			cs.done[id] = true
		}
	}
}

// hung breaks the chain of a message whose publish hung: the messages
// queued behind it become orphans, released without waiting for the hung
// publish to return (its shard is given up once nothing else of it is in
// flight), and the hung message leaves its chain, so that the aggregate
// can be read again once its shard is taken again. It reports whether
// there were orphans.
func (cs *chains) hung(id int64) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	agg, ok := cs.ids[id]
	if !ok {
		return false
	}
	ch := cs.aggs[agg]
	delete(cs.ids, id)
	if ch.members--; ch.members == 0 {
		delete(cs.aggs, agg)
	}
	ch.broken = true
	for _, c := range ch.queue {
		c.dropped = true
	}
	cs.orphans, ch.queue = append(cs.orphans, ch.queue...), nil
	return len(cs.orphans) > 0
}

// handing counts a message about to be handed to the workers.
func (cs *chains) handing() { cs.working.Add(1) }

// finished counts a message a worker is done with, its chain followed.
func (cs *chains) finished() {
	if cs.working.Add(-1) == 0 {
		select {
		case cs.idle <- struct{}{}:
		default:
		}
	}
}

// takeOrphans returns the orphans and forgets them.
func (cs *chains) takeOrphans() []*claimed {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	out := cs.orphans
	cs.orphans = nil
	return out
}
