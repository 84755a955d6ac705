package lease

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/outboxd/outbox/internal/store"
)

// Poison messages under snapshot cursors, as under shard leases
// (docs/shard-leases.md, "Poison messages"): a crash is charged only to a
// message known to have been alone in flight. A shard taken from an owner
// that died is delivered one message at a time for the next Window
// messages read of it (whatever the dead owner can have had in flight
// lies among them, since it read the same windows from the same cursor),
// each declared in the shard row before it goes out (shard_isolate.sql).
// A takeover charges the message its dead owner had declared, if that
// message is still undelivered (shard_acquire.sql counts the crash on the
// row, the one write of an outbox row it makes); here the charge is added
// to the message's attempts when it is read again, and once the failed
// deliveries and crashes use up MaxAttempts it is parked dead instead of
// being delivered.

// crash is the crashes charged to a message, and its shard.
type crash struct {
	shard, n int
}

// takeShard records what a takeover found: the crashes charged to the
// message its dead owner declared, and whether the shard is to be
// isolated.
func (c *cursorLeases) takeShard(ctx context.Context, a *store.AcquiredShard) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.Attempts != nil && a.StrikeID != nil {
		c.crashes[*a.StrikeID] = crash{shard: a.Shard, n: *a.Attempts}
		c.log.WarnContext(ctx, "took over a shard whose owner died delivering this message alone: the crash counts as an attempt",
			slog.Int("shard", a.Shard), slog.Int64("outbox_id", *a.StrikeID), slog.Int("strikes", a.Strikes),
			slog.Int("crashes", *a.Attempts))
	}
	if a.IsolateThrough != nil {
		c.isolating[a.Shard] = max(c.cfg.Window, 1)
		if a.Attempts == nil {
			c.log.InfoContext(ctx, "took over a shard whose owner did not release it: delivering its next messages one at a time",
				slog.Int("shard", a.Shard), slog.Int("messages", c.isolating[a.Shard]))
		}
	}
	// The isolation is counted here, not bounded by an id: a window's
	// rows are not in the order of their ids across windows.
	a.IsolateThrough = nil
	return nil
}

// isolatedIdle are the shards held under isolation with nothing in flight
// (called under mu): each may deliver its next message. The isolation and
// the crash charges of shards no longer held are forgotten: a takeover
// reports them again.
func (c *cursorLeases) isolatedIdle() map[int]bool {
	for id, x := range c.crashes {
		if _, held := c.members.held[x.shard]; !held {
			delete(c.crashes, id)
		}
	}
	if len(c.isolating) == 0 {
		return nil // the usual case: no walk of the messages in flight
	}
	busy := c.flight.busy()
	out := map[int]bool{}
	for shard := range c.isolating {
		if _, held := c.members.held[shard]; !held {
			delete(c.isolating, shard)
			continue
		}
		if !busy[shard] && !c.flight.abandoned[shard] {
			out[shard] = true
		}
	}
	return out
}

// declare writes, before any of them goes out, the declaration of each
// row read of an idle isolated shard (at most one per shard), and the end
// of the isolation of those whose count is used up or that have nothing
// to deliver (nothing was taken of them, no parked message was due, and
// their window is read to its end). A shard whose message taken was held
// back, buried or gone declares nothing this time. It returns the rows
// whose declaration held; those of a shard lost are forgotten as rows
// read and not handed out.
func (c *cursorLeases) declare(ctx context.Context, idle, taken map[int]bool, tokens map[int]int64, rows []store.Row) ([]store.Row, error) {
	if len(idle) == 0 {
		return rows, nil
	}
	var writes []store.Isolation
	declared := map[int]bool{}
	c.mu.Lock()
	for i := range rows {
		if r := &rows[i]; idle[r.Shard] && c.isolating[r.Shard] > 0 {
			writes = append(writes, store.Isolation{ShardLease: store.ShardLease{Shard: r.Shard, Token: tokens[r.Shard]}, ID: &r.ID})
			declared[r.Shard] = true
		}
	}
	for _, shard := range sortedKeys(idle) {
		w := c.windows[shard]
		drained := !taken[shard] && w != nil && w.loaded && !w.stale && len(w.ids) == 0
		if !declared[shard] && (c.isolating[shard] <= 0 || drained) {
			writes = append(writes, store.Isolation{ShardLease: store.ShardLease{Shard: shard, Token: tokens[shard]}})
		}
	}
	c.mu.Unlock()
	if len(writes) == 0 {
		return rows, nil
	}
	written, err := c.store.Isolate(ctx, c.pool, c.cfg.Owner, writes)
	c.mu.Lock()
	defer c.mu.Unlock()
	held := map[int]bool{}
	for _, shard := range written {
		held[shard] = true
	}
	if err != nil {
		held = map[int]bool{}
	}
	for _, w := range writes {
		switch {
		case !held[w.Shard]:
		case w.ID == nil:
			delete(c.isolating, w.Shard)
		default:
			c.isolating[w.Shard]--
		}
	}
	out := rows[:0]
	for _, r := range rows {
		if idle[r.Shard] && !held[r.Shard] && declared[r.Shard] {
			c.unleased(r.ID)
			continue
		}
		out = append(out, r)
	}
	return out, err
}

// charge adds to each row read the crashes charged to it (called under
// mu), and parks dead, undelivered, the rows whose failed deliveries and
// crashes used up their attempts. It returns the rows to deliver.
func (c *cursorLeases) charge(rows []store.Row) []store.Row {
	if len(c.crashes) == 0 {
		return rows
	}
	out := rows[:0]
	for _, r := range rows {
		x, ok := c.crashes[r.ID]
		n := x.n
		if !ok {
			out = append(out, r)
			continue
		}
		delete(c.crashes, r.ID)
		b := c.batchOf[r.ID]
		e := b.entry(r.ID) // every row read is in its batch
		failed := r.Attempts - 1
		if failed+n < c.cfg.MaxAttempts {
			r.Attempts += n
			e.failed += n
			out = append(out, r)
			continue
		}
		cause := fmt.Errorf("lease expired after max attempts: dispatcher died %d times delivering this message alone", n)
		e.failed += n
		c.burials[r.ID] = cause
		c.drop(b, store.RowWrite{ID: r.ID, LeaseVersion: b.lease.Token, Status: store.StatusDead, Error: cause.Error(), Refund: true})
	}
	return out
}

// burial is a message parked dead for its crashes, written.
type burial struct {
	id, token int64
	cause     error
}

// buried returns the messages of b parked dead for their crashes, if its
// batch was written (held), and forgets them (called under mu).
func (c *cursorLeases) buried(b *batch, held bool) []burial {
	var out []burial
	for _, p := range b.parks {
		cause, ok := c.burials[p.ID]
		if !ok {
			continue
		}
		delete(c.burials, p.ID)
		if held {
			out = append(out, burial{p.ID, b.lease.Token, cause})
		}
	}
	return out
}

// announce tells the dispatcher of the messages buried (not under mu: it
// reads each back for the hook).
func (c *cursorLeases) announce(ctx context.Context, buried []burial) {
	for _, x := range buried {
		c.log.ErrorContext(ctx, "message went dead: it crashed its dispatchers", slog.Int64("outbox_id", x.id))
		c.cb.buried(ctx, x.id, x.token, x.cause)
	}
}
