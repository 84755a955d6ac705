package lease

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/store"
)

// Decision is the outcome of a write a batched mode decided: whether it
// held. ID and Token name the write (its RowWrite's ID and LeaseVersion).
type Decision struct {
	ID, Token int64
	Held      bool
}

// Batched is a mode whose writes take effect a read batch at a time
// (snapshot cursors): the completer hands it the verdicts as they come,
// and learns of each write's fate once the last verdict of its batch came
// and the batch was written.
type Batched interface {
	Mode
	// Decide records writes and writes every batch that is complete,
	// returning the writes decided, those of earlier calls included. A
	// write recorded before is not recorded again, so a call that failed
	// may be made again with the same writes.
	Decide(ctx context.Context, writes []store.RowWrite) ([]Decision, error)
	// Abandon gives up the batches that could not be written: their
	// shards are read again from what is stored once nothing of them is
	// in flight, and every write recorded for them is decided unheld.
	Abandon() []Decision
	// Kick fires when batches became complete without a verdict (a batch
	// held back whole, a window found empty): the completer then calls
	// Decide with no writes.
	Kick() <-chan struct{}
}

// cursorLeases are snapshot cursors on shard leases (docs/snapshot-cursors.md):
// the shards are owned, renewed and balanced as under shard leases, but a
// shard is read as windows of committed transactions, and a message is
// written only when it is not delivered (it is parked). The cursor of a
// shard moves, one write per batch, fenced on the shard's token, once
// every message of the batch has its outcome.
type cursorLeases struct {
	*shardLeases
	// cacheSize is how many ids of a window one load reads.
	cacheSize int
	kick      chan struct{}

	// Guarded by shardLeases.mu.
	windows map[int]*window
	// batchOf maps each message read and not yet decided to its batch.
	batchOf map[int64]*batch
	// parkedAt is when the parked messages are next read.
	parkedAt time.Time
	// lastOf is, ordered, each aggregate's last message handed out, and
	// the read it was handed out in; reads counts the reads begun.
	lastOf map[string]last
	reads  uint64
	// undelivered are, ordered, the aggregates of messages settled not
	// delivered while a read ran, in the order they were (see chain).
	undelivered []settledAt
	// turn rotates the shard a read starts filling its room from.
	turn int
	// isolating counts, per shard taken from an owner that died, the
	// messages still to deliver one at a time, each declared in the
	// shard row before it goes out (see takeShard); crashes are the
	// crashes charged to messages declared when their owner died, by id,
	// until they are read again.
	isolating map[int]int
	crashes   map[int64]crash
	// burials are the messages written dead for their crashes, with the
	// cause, until their batch is written; then, if it held, they are
	// buried, for the next Decide to announce.
	burials map[int64]error
	toBury  []burial
	// undecided are the batches complete and not yet written, in the
	// order they are to be written; decided the writes decided outside a
	// Decide call (of batches given up), for the next one to return.
	undecided []*batch
	decided   []Decision
	// afterAdvance, when set (by tests), runs as a Decide's statement
	// returns, before its outcome is taken in.
	afterAdvance func()
}

func newCursorLeases(st *store.Store, pool *pgxpool.Pool, cfg Config, cb Callbacks, log *slog.Logger, count int, leases *Registry) *cursorLeases {
	c := &cursorLeases{
		shardLeases: newShardLeases(st, pool, cfg, cb, log, count, leases),
		cacheSize:   max(4*cfg.Window, 1024),
		kick:        make(chan struct{}, 1),
		windows:     map[int]*window{}, batchOf: map[int64]*batch{}, lastOf: map[string]last{},
		isolating: map[int]int{}, crashes: map[int64]crash{}, burials: map[int64]error{},
	}
	c.hung, c.takeover = c.parkHung, c.takeShard
	return c
}

// hungError is the outcome written for a publish hung past its timeout.
const hungError = "publish hung past its timeout (the sink ignores its context)"

// parkHung writes a publish hung past its timeout off as a failed attempt
// (called under mu): it is parked as a retry with its batch, whose other
// outcomes are known, so the batch and those behind it are written and the
// shard is given up with nothing of it unwritten (see giveUpHung): its next
// owner retries the hung message alone, under a new token. The hung
// publish's verdict, if the sink ever returns, finds its batch decided and
// writes nothing.
func (c *cursorLeases) parkHung(hung []store.Lease) {
	kicked := false
	for _, l := range hung {
		b := c.batchOf[l.ID]
		if b == nil || b.lease.Token != l.Version || b.dead {
			continue
		}
		w := store.RowWrite{ID: l.ID, LeaseVersion: l.Version, Status: store.StatusPending, Delay: c.cfg.PublishTimeout, Error: hungError}
		if e := b.entry(l.ID); e != nil && e.failed+1 >= c.cfg.MaxAttempts {
			w.Status, w.Delay, w.Error = store.StatusDead, 0, "retries exhausted: "+hungError
		}
		if ok, _ := c.record(b, w); ok && b.complete() {
			kicked = true
		}
	}
	if kicked {
		c.kickCompleter()
	}
}

// record notes the outcome w of one of b's messages (under mu). A batch
// given up decides its writes at once, unheld; a batch of parked messages
// is queued to be written once complete; a window batch is written when
// ready takes it, in read order. It reports false when w was recorded
// before (a write tried again).
func (c *cursorLeases) record(b *batch, w store.RowWrite) (bool, []Decision) {
	if !b.settle(w.ID, w) {
		return false, nil
	}
	b.writes = append(b.writes, w.ID)
	switch {
	case b.dead:
		return true, c.decideAll(b, false)
	case b.hi == "" && b.complete():
		c.undecided = append(c.undecided, b)
	}
	return true, nil
}

// drop settles one of b's messages that goes out no more, with no
// decision to come (under mu): held back behind an earlier message of its
// aggregate (w carries no status), or parked dead for its crashes. Its
// outcome is parked with its batch; a batch of parked messages it
// completes is queued to be written, as record queues one.
func (c *cursorLeases) drop(b *batch, w store.RowWrite) {
	if !b.settle(w.ID, w) {
		return
	}
	delete(c.batchOf, w.ID)
	if b.complete() {
		if b.hi == "" && !b.dead {
			c.undecided = append(c.undecided, b)
		}
		c.kickCompleter()
	}
}

// Claim reads the parked messages that are due (at most once per poll
// interval unless one is known to be due), then the windows of the shards
// held: a load of the windows whose ids are used up, then the rows of up
// to batch ids taken from them, fetched by primary key. Ordered, a row
// whose aggregate has an earlier parked message is held back (parked
// behind it) and not returned.
func (c *cursorLeases) Claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	if clearWait {
		if err := c.store.Unwait(ctx, c.pool, c.cfg.Owner); err != nil {
			return nil, time.Time{}, err
		}
	}
	now := c.cfg.Clock.Now()
	c.mu.Lock()
	began := c.begin()
	tokens := c.sync()
	idle := c.isolatedIdle()
	var parkedFrom, isolatedFrom []store.ShardLease
	var exclude []int64
	if !c.parkedAt.After(now) || clearWait {
		c.parkedAt = now.Add(c.cfg.PollInterval)
		for _, shard := range c.members.sorted() {
			if _, isolated := c.isolating[shard]; !isolated && !c.flight.abandoned[shard] {
				parkedFrom = append(parkedFrom, store.ShardLease{Shard: shard, Token: tokens[shard]})
			}
		}
		exclude = c.flight.exclude()
	}
	for _, shard := range sortedKeys(idle) {
		isolatedFrom = append(isolatedFrom, store.ShardLease{Shard: shard, Token: tokens[shard]})
	}
	c.mu.Unlock()

	var rows []store.Row
	var dbNow time.Time
	// An isolated shard with nothing in flight delivers one message: a
	// parked one that is due, else the next of its window.
	taken := map[int]bool{}
	read := func(from []store.ShardLease, perShard int) error {
		got, err := c.store.ReadParked(ctx, c.pool, c.cfg.Owner, from, perShard, exclude, c.cfg.Ordered)
		if err != nil {
			return err
		}
		kept := got.Rows[:min(len(got.Rows), batch-len(rows))]
		for _, r := range kept {
			taken[r.Shard] = true
		}
		rows, dbNow = append(rows, kept...), got.Now
		c.mu.Lock()
		c.batchParked(kept, got.Origin)
		c.mu.Unlock()
		return nil
	}
	if len(isolatedFrom) > 0 {
		if err := read(isolatedFrom, 1); err != nil {
			return nil, time.Time{}, err
		}
	}
	if len(parkedFrom) > 0 && len(rows) < batch {
		if err := read(parkedFrom, batch); err != nil {
			return nil, time.Time{}, err
		}
	}
	if room := batch - len(rows); room > 0 {
		got, at, err := c.readWindows(ctx, room, idle, taken)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !at.IsZero() {
			dbNow = at
		}
		if rows == nil {
			rows = got
		} else {
			rows = append(rows, got...)
		}
	}
	if dbNow.IsZero() {
		dbNow = now
	}
	c.mu.Lock()
	rows = c.charge(rows)
	c.mu.Unlock()
	rows, err := c.declare(ctx, idle, taken, tokens, rows)
	if err != nil {
		c.mu.Lock()
		for _, r := range rows {
			c.unleased(r.ID)
		}
		c.mu.Unlock()
		return nil, time.Time{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handOut(rows, tokens, began), dbNow, nil
}

// handOut chains the rows of the read that began as read began (see
// chain), and returns those of shards still held under the token they
// were read with (called under mu).
func (c *cursorLeases) handOut(rows []store.Row, tokens map[int]int64, began uint64) []store.Row {
	return c.leaseLocked(c.chain(rows, began), tokens, c.unleased)
}

// unleased forgets a message read and not handed out, its shard no longer
// held under the token it was read with (called under mu). A parked
// message stays parked. A window message must not be passed by its
// cursor: the shard's batches not yet written under that token are given
// up, as the shard is. Counting it settled instead let its batch be
// written by a dispatcher that had dropped the shard from memory while the
// database still named it the owner (a renewal that came back without the
// shard, a shard given up and not yet released), moving the cursor past a
// message nobody delivered.
func (c *cursorLeases) unleased(id int64) {
	b := c.batchOf[id]
	if b == nil {
		return
	}
	delete(c.batchOf, id)
	if b.hi == "" {
		b.gone(id)
		return
	}
	if w := c.windows[b.lease.Shard]; w != nil && w.token == b.lease.Token {
		c.stale(w)
	}
	c.kill([]*batch{b})
}

// sync forgets the windows of shards no longer held under their token (or
// stale with nothing in flight, to be loaded again) and returns the token
// of each shard held.
func (c *cursorLeases) sync() map[int]int64 {
	busy := c.flight.busy()
	for shard, w := range c.windows {
		if c.members.holds(shard, w.token) && (!w.stale || busy[shard]) {
			continue
		}
		c.kill(w.batches)
		delete(c.windows, shard)
	}
	tokens := make(map[int]int64, len(c.members.held))
	for shard, token := range c.members.held {
		tokens[shard] = token
		if c.windows[shard] == nil {
			c.windows[shard] = &window{token: token}
		}
	}
	return tokens
}

// batchParked puts parked messages read on origin into one batch per
// shard.
func (c *cursorLeases) batchParked(rows []store.Row, origin string) {
	per := map[int]*batch{}
	for i := range rows {
		r := &rows[i]
		b := per[r.Shard]
		if b == nil {
			b = newBatch(store.ShardLease{Shard: r.Shard, Token: c.windows[r.Shard].token}, "")
			b.origin = origin
			per[r.Shard] = b
		}
		b.add(r, true)
		c.batchOf[r.ID] = b
	}
}

// readWindows loads the windows that need it, takes up to room ids of
// them and fetches their rows. Of an isolated shard (isolated) it takes
// one id, unless one of its parked messages was taken (taken; it adds
// those it takes from); of a shard under isolation not among them, none.
func (c *cursorLeases) readWindows(ctx context.Context, room int, isolated, taken map[int]bool) ([]store.Row, time.Time, error) {
	// A second load opens the next window of the shards whose open window
	// turned out to have nothing left (closed by an empty batch).
	for round := 0; round < 2; round++ {
		c.mu.Lock()
		var loads []store.WindowLoad
		for _, shard := range c.members.sorted() {
			w := c.windows[shard]
			if w == nil || c.flight.abandoned[shard] {
				continue
			}
			if l, ok := w.plan(store.ShardLease{Shard: shard, Token: w.token}); ok && (round == 0 || l.Hi == "") {
				loads = append(loads, l)
			}
		}
		c.mu.Unlock()
		if len(loads) == 0 {
			break
		}
		got, err := c.store.LoadWindows(ctx, c.pool, c.cfg.Owner, loads, c.cacheSize)
		if err != nil {
			return nil, time.Time{}, err
		}
		c.mu.Lock()
		closed := false
		for _, g := range got {
			if w := c.windows[g.Shard]; w != nil && c.members.holds(g.Shard, w.token) {
				if g.Moved {
					// A failover since the window was read: what is
					// stored is read again once nothing of it is in
					// flight.
					c.log.Warn("a shard's window was read before a failover: it is read again from the cursor stored", "shard", g.Shard)
					c.stale(w)
					continue
				}
				if b := w.load(store.ShardLease{Shard: g.Shard, Token: w.token}, g, c.cacheSize); b != nil {
					closed = true
				}
			}
		}
		c.mu.Unlock()
		if !closed {
			break
		}
		c.kickCompleter()
	}

	c.mu.Lock()
	shards := c.members.sorted()
	have := make([]int, len(shards))
	for i, shard := range shards {
		w := c.windows[shard]
		if w == nil || w.stale || c.flight.abandoned[shard] {
			continue
		}
		have[i] = len(w.ids)
		if _, ok := c.isolating[shard]; ok {
			have[i] = 0
			if isolated[shard] && !taken[shard] {
				have[i] = min(len(w.ids), 1)
			}
		}
	}
	var ids []int64
	c.turn++
	for i, n := range fill(room, have, c.turn) {
		if n == 0 {
			continue
		}
		w := c.windows[shards[i]]
		b, got := w.take(store.ShardLease{Shard: shards[i], Token: w.token}, n)
		for _, id := range got {
			c.batchOf[id] = b
		}
		ids = append(ids, got...)
		if isolated[shards[i]] {
			taken[shards[i]] = true
		}
	}
	c.mu.Unlock()
	if len(ids) == 0 {
		return nil, time.Time{}, nil
	}
	rows, at, err := c.fetch(ctx, ids)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// The ids were taken: their batches are given up, and their
		// shards read again from what is stored once nothing of them is
		// in flight.
		for _, id := range ids {
			b := c.batchOf[id]
			b.gone(id)
			delete(c.batchOf, id)
			if w := c.windows[b.lease.Shard]; w != nil && w.token == b.lease.Token {
				c.stale(w)
			}
		}
		return nil, time.Time{}, err
	}
	out := rows[:0]
	// The ids are distinct: a fetch that returned as many rows as ids
	// missed none, and needs no set of those it found.
	var fetched map[int64]bool
	if len(rows) < len(ids) {
		fetched = make(map[int64]bool, len(rows))
	}
	kicked := false
	for i := range rows {
		r := &rows[i]
		if fetched != nil {
			fetched[r.ID] = true
		}
		b := c.batchOf[r.ID]
		b.fetched(r)
		if r.Blocked {
			// Held back behind an earlier parked message of its aggregate.
			c.drop(b, store.RowWrite{ID: r.ID})
			continue
		}
		out = append(out, *r)
	}
	for _, id := range ids {
		if fetched != nil && !fetched[id] {
			// Gone from the table since the load: nothing to deliver.
			b := c.batchOf[id]
			b.gone(id)
			delete(c.batchOf, id)
			kicked = b.complete() || kicked
		}
	}
	if kicked {
		c.kickCompleter()
	}
	return out, at, nil
}

// fetchSplit is the fewest ids a fetch statement is sent for when a read
// is split (see fetch).
const fetchSplit = 128

// fetch reads the rows of ids by primary key, in that order. A large read
// is split in two statements sent at once on two connections, so that the
// server probes one half while the relay decodes the other: the read is
// the claim loop's critical path.
func (c *cursorLeases) fetch(ctx context.Context, ids []int64) ([]store.Row, time.Time, error) {
	out := make([]store.Row, 0, len(ids))
	if len(ids) < 2*fetchSplit {
		return c.store.FetchRows(ctx, c.pool, ids, c.cfg.Ordered, out)
	}
	// Each half is scanned into its part of one slice; the second moves
	// down only when rows of the first were gone.
	half := len(ids) / 2
	var rest []store.Row
	var restErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		rest, _, restErr = c.store.FetchRows(ctx, c.pool, ids[half:], c.cfg.Ordered, out[half:half:len(ids)])
	})
	first, at, err := c.store.FetchRows(ctx, c.pool, ids[:half], c.cfg.Ordered, out[:0:half])
	wg.Wait()
	if err == nil {
		err = restErr
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	n := copy(out[len(first):len(first)+len(rest)], rest)
	return out[:len(first)+n], at, nil
}

// stale marks w to be loaded again from what is stored, once nothing of
// its shard is in flight; its batches not yet written are given up.
func (c *cursorLeases) stale(w *window) {
	w.stale = true
	c.kill(w.batches)
	w.batches = nil
}

// kill gives batches up: the writes recorded for them are decided unheld
// now, and those still to come as they come.
func (c *cursorLeases) kill(batches []*batch) {
	for _, b := range batches {
		if b.dead {
			continue
		}
		b.dead = true
		if len(b.writes) > 0 {
			c.decided = append(c.decided, c.decideAll(b, false)...)
			c.kickCompleter()
		} else {
			c.buried(b, false)
		}
	}
}

func (c *cursorLeases) kickCompleter() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Kick fires when batches became complete outside a Decide call.
func (c *cursorLeases) Kick() <-chan struct{} { return c.kick }

// last is an aggregate's last message handed out, and the read it was
// handed out in.
type last struct {
	id   int64
	read uint64
}

// settledAt is the aggregate of a message settled not delivered, and the
// number of the read running then.
type settledAt struct {
	agg  string
	read uint64
}

// begin counts a read begun and returns its number (called under mu).
// Every read from this one on saw the outcomes settled before it began.
func (c *cursorLeases) begin() uint64 {
	c.reads++
	n := 0
	for n < len(c.undelivered) && c.undelivered[n].read < c.reads {
		n++
	}
	c.undelivered = slices.Delete(c.undelivered, 0, n)
	return c.reads
}

// chain sets, ordered, each row's Prev: the message of its aggregate
// handed out before it, still in flight or read earlier in the same read
// (chains take a row only behind its Prev). It holds back the rows of an
// aggregate one of whose messages was settled not delivered since the
// read began: the read's statements may have run before that message's
// parked row was written, so it did not hold them back there, and its
// chain, settled too, no longer does. It returns the rows not held back.
func (c *cursorLeases) chain(rows []store.Row, began uint64) []store.Row {
	if !c.cfg.Ordered {
		return rows
	}
	blocked := make(map[string]bool, len(c.undelivered))
	for _, u := range c.undelivered {
		blocked[u.agg] = true
	}
	kept := rows[:0]
	for i := range rows {
		r := &rows[i]
		if blocked[r.AggregateID] {
			if b := c.batchOf[r.ID]; b != nil {
				c.drop(b, store.RowWrite{ID: r.ID})
			}
			continue
		}
		if l, ok := c.lastOf[r.AggregateID]; ok {
			if _, inFlight := c.flight.of(l.id); inFlight || l.read == began {
				r.Prev = l.id
			}
		}
		c.lastOf[r.AggregateID] = last{id: r.ID, read: began}
		kept = append(kept, *r)
	}
	return kept
}

// errBatched reports a call of Finalize on a batched mode, whose writes
// go through Decide.
var errBatched = errors.New("lease: snapshot cursors write their outcomes through Decide")

// Finalize is not how a batched mode's outcomes are written (see Batched).
func (c *cursorLeases) Finalize(context.Context, []store.RowWrite) ([]bool, error) {
	return nil, errBatched
}

// Decide records each write in its batch and writes the batches complete
// at the front of their shards (and every complete batch of parked
// messages) in one statement.
func (c *cursorLeases) Decide(ctx context.Context, writes []store.RowWrite) ([]Decision, error) {
	c.mu.Lock()
	out := c.decided
	c.decided = nil
	for _, w := range writes {
		b := c.batchOf[w.ID]
		if b == nil || b.lease.Token != w.LeaseVersion {
			// Not read under this token, or given up with its shard.
			out = append(out, Decision{ID: w.ID, Token: w.LeaseVersion})
			continue
		}
		_, decided := c.record(b, w)
		out = append(out, decided...)
	}
	for _, shard := range sortedKeys(c.windows) {
		c.undecided = append(c.undecided, c.windows[shard].ready()...)
	}
	todo := c.undecided
	c.mu.Unlock()
	if len(todo) == 0 {
		return out, nil
	}
	advances, parks := writesOf(todo)
	held, err := c.store.AdvanceCursors(ctx, c.pool, c.cfg.Owner, advances, parks)
	if c.afterAdvance != nil {
		c.afterAdvance()
	}
	c.mu.Lock()
	defer func() {
		buried := c.toBury
		c.toBury = nil
		c.mu.Unlock()
		c.announce(ctx, buried)
	}()
	if err != nil {
		// Kept for the next try, which writes the same again.
		c.decided = append(out, c.decided...)
		return nil, err
	}
	// Batches completed while the statement ran (a hung publish parked by
	// the keeper, a message held back) were queued behind those written:
	// they stay for the next call.
	if c.undecided = c.undecided[len(todo):]; len(c.undecided) == 0 {
		c.undecided = nil
	}
	now := c.cfg.Clock.Now()
	for _, b := range todo {
		ok := held[b.lease.Shard]
		out = append(out, c.decideAll(b, ok)...)
		if w := c.windows[b.lease.Shard]; !ok && w != nil && w.token == b.lease.Token {
			c.stale(w)
		}
		for _, p := range b.parks {
			// A retry comes due after its delay; a message held back
			// may be due once the one before it is delivered.
			if p.Status == store.StatusPending {
				c.parkDue(now.Add(p.Delay))
			}
		}
		if b.hi == "" {
			c.parkDue(now)
		}
	}
	return out, nil
}

// writesOf is the statement's part of batches: per shard the last cursor
// move (a later batch stands for the ones before it), and every park. A
// shard whose batches were read on different origins (across a failover)
// is given no origin, which no server has: it is not written.
func writesOf(batches []*batch) ([]store.Advance, []store.Park) {
	var advances []store.Advance
	var parks []store.Park
	at := map[int]int{}
	mixed := map[int]bool{}
	for _, b := range batches {
		parks = append(parks, b.parks...)
		i, ok := at[b.lease.Shard]
		if !ok {
			at[b.lease.Shard], i = len(advances), len(advances)
			advances = append(advances, store.Advance{ShardLease: b.lease, Origin: b.origin})
		}
		mixed[b.lease.Shard] = mixed[b.lease.Shard] || advances[i].Origin != b.origin
		if b.hi != "" {
			advances[i] = b.advance()
		}
	}
	for i := range advances {
		if mixed[advances[i].Shard] {
			advances[i].Origin = ""
		}
	}
	return advances, parks
}

// parkDue makes the parked messages be read by at.
func (c *cursorLeases) parkDue(at time.Time) {
	if at.Before(c.parkedAt) {
		c.parkedAt = at
	}
}

// decideAll decides every write of b, and forgets its messages.
func (c *cursorLeases) decideAll(b *batch, held bool) []Decision {
	c.toBury = append(c.toBury, c.buried(b, held)...)
	out := make([]Decision, len(b.writes))
	for i, id := range b.writes {
		out[i] = Decision{ID: id, Token: b.lease.Token, Held: held}
		if c.batchOf[id] == b {
			delete(c.batchOf, id)
		}
	}
	b.writes = nil
	return out
}

func sortedKeys[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Abandon gives up the batches that could not be written (see Batched).
func (c *cursorLeases) Abandon() []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.undecided {
		c.decided = append(c.decided, c.decideAll(b, false)...)
		if w := c.windows[b.lease.Shard]; w != nil && w.token == b.lease.Token {
			c.stale(w)
		}
	}
	c.undecided = nil
	out := c.decided
	c.decided = nil
	return out
}

// Settled forgets the messages settled: decided ones, and those the
// fetcher forgot unwritten (held back behind an earlier message of their
// aggregate), which are parked with the batch they were read in.
func (c *cursorLeases) Settled(writes []store.RowWrite) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range writes {
		if b := c.batchOf[w.ID]; b != nil && b.lease.Token == w.LeaseVersion {
			// Forgotten unwritten: held back, parked with its batch.
			c.drop(b, store.RowWrite{ID: w.ID})
		}
		if !c.cfg.Ordered {
			continue
		}
		agg, inFlight := c.flight.aggs[w.ID]
		if !inFlight {
			continue
		}
		if w.Status != "" && w.Status != store.StatusDone {
			c.undelivered = append(c.undelivered, settledAt{agg: agg, read: c.reads})
		}
		if c.lastOf[agg].id == w.ID {
			delete(c.lastOf, agg)
		}
	}
	c.flight.settle(writes)
}

// Ordered and Chained: as under shard leases.
func (c *cursorLeases) Ordered() bool { return c.cfg.Ordered }
func (c *cursorLeases) Chained() bool { return c.cfg.Ordered }

// Undelivered reports a parked message waiting or a committed row past its
// shard's cursor.
func (c *cursorLeases) Undelivered(ctx context.Context) (bool, error) {
	return c.store.CursorUndelivered(ctx, c.pool, c.cfg.Ordered)
}

// Close writes the batches complete without a verdict, then gives the
// shards back.
func (c *cursorLeases) Close(ctx context.Context) error {
	if _, err := c.Decide(ctx, nil); err != nil {
		c.Abandon()
		return errors.Join(err, c.shardLeases.Close(ctx))
	}
	return c.shardLeases.Close(ctx)
}
