package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/internal/store"
)

// shardLeases owns whole shards of the table: the fetcher reads the heads
// of the shards held, the completer finalizes fenced on each shard's
// token, and the keeper renews, balances and takes over shards. A shard
// taken over from an owner that died is delivered one message at a time,
// each declared before it goes out, up to the last message that owner can
// have had in flight (docs/shard-leases.md).
type shardLeases struct {
	store *store.Store
	pool  *pgxpool.Pool
	cfg   Config
	cb    Callbacks
	log   *slog.Logger
	count int // the table's shards
	// leases is the run's registry, whose leases the keeper renews.
	leases *Registry

	// mu guards the state below; store calls are made without it.
	mu      sync.Mutex
	members membership
	flight  flight
	cursors cursors
	waiting waiting
	// sweepNext makes the next claim sweep every shard (see Sweep).
	sweepNext bool
	// renewedAt is when the last renewal that succeeded was sent: the
	// tokens held are trusted until renewedAt + the lease less a tenth.
	renewedAt time.Time
	// lookedAt is when the free shards were last counted, between renewals;
	// lookGap how long until the next count (see due).
	lookedAt time.Time
	lookGap  time.Duration
	// down follows a run of failed keeper turns; only the keeper's
	// goroutine touches it.
	down service.Outage
	// hung, when set, is told under mu of the publishes found hung, for a
	// mode that holds outcomes in memory (snapshot cursors' batches).
	hung func([]store.Lease)
	// takeover handles a shard just acquired before it joins the
	// membership (see takeShard; snapshot cursors keep their own count of
	// crashes and isolation). An error leaves the shard out until a
	// renewal lists it.
	takeover func(ctx context.Context, a *store.AcquiredShard) error
}

func newShardLeases(st *store.Store, pool *pgxpool.Pool, cfg Config, cb Callbacks, log *slog.Logger, count int, leases *Registry) *shardLeases {
	s := &shardLeases{
		store: st, pool: pool, cfg: cfg, cb: cb, log: log, count: count, leases: leases,
		members: newMembership(), flight: newFlight(cfg.Ordered), cursors: cursors{}, waiting: waiting{},
	}
	s.takeover = s.takeShard
	return s
}

// Claim reads the held shards: the next message of each isolated shard
// with nothing in flight, declared before it is handed over, then a prefix
// of each other shard's queue, up to batch rows in all (see readPlain).
// clearWait drops the dispatcher's waiter row first, as a row claim does
// in its statement; the read that follows sees every commit the cleared
// row would have notified, and sweeps every shard from the front, since a
// commit that notified may have had a lower id than rows read before. The
// leases themselves are kept by the keeper, on its own schedule.
func (s *shardLeases) Claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	if clearWait {
		if err := s.store.Unwait(ctx, s.pool, s.cfg.Owner); err != nil {
			return nil, time.Time{}, err
		}
	}
	s.mu.Lock()
	sweep := clearWait || s.sweepNext
	s.sweepNext = false
	plain, isolated, tokens := readPlan(&s.members, &s.flight)
	var exclude []int64
	if len(isolated) > 0 {
		exclude = s.flight.exclude() // read from the front
	}
	s.mu.Unlock()
	var rows []store.Row
	var now time.Time
	if len(isolated) > 0 {
		got, at, err := s.store.ReadShards(ctx, s.pool, store.ShardReadParams{
			Owner: s.cfg.Owner, Reads: reads(isolated, tokens, nil, 1), InFlight: exclude, Ordered: s.cfg.Ordered, HeadsOnly: true,
		})
		if err != nil {
			return nil, time.Time{}, err
		}
		if rows, err = s.isolate(ctx, isolated, tokens, got, batch); err != nil {
			return nil, time.Time{}, err
		}
		now = at
	}
	if room := batch - len(rows); room > 0 && len(plain) > 0 {
		got, at, err := s.readPlain(ctx, plain, tokens, room, sweep)
		if err != nil {
			return nil, time.Time{}, err
		}
		if len(got) > 0 || now.IsZero() {
			now = at
		}
		rows = append(rows, got...)
	}
	return s.lease(rows, tokens), now, nil
}

// readPlain reads up to room rows of shards, each after its cursor: an
// equal share of room per shard, then what the shards that had less left
// unused, among those that filled their share (one busy aggregate's shard
// gets the whole batch, in two reads).
func (s *shardLeases) readPlain(ctx context.Context, shards []int, tokens map[int]int64, room int, sweep bool) ([]store.Row, time.Time, error) {
	var out []store.Row
	var dbNow time.Time
	for round := 0; round < 2 && room > 0 && len(shards) > 0; round++ {
		limit := (room + len(shards) - 1) / len(shards)
		now := s.cfg.Clock.Now()
		s.mu.Lock()
		s.cursors.forget(s.members.held)
		after, exclude := s.cursors.plan(shards, tokens, &s.flight, out, now, s.cfg.PollInterval, round == 0, sweep)
		waiting := s.waiting.list(now)
		s.mu.Unlock()
		got, at, err := s.store.ReadShards(ctx, s.pool, store.ShardReadParams{
			Owner: s.cfg.Owner, Reads: reads(shards, tokens, after, limit), InFlight: exclude, Waiting: waiting, Ordered: s.cfg.Ordered,
		})
		if err != nil {
			return nil, time.Time{}, err
		}
		dbNow = at
		// Rows beyond room are dropped unread, so each shard's cursor moves
		// only past what is kept; a shard that filled its share has more.
		n, kept, last := map[int]int{}, map[int]int{}, map[int]int64{}
		for i, r := range got {
			n[r.Shard]++
			if i < room {
				kept[r.Shard]++
				last[r.Shard] = max(last[r.Shard], r.ID)
			}
		}
		got = got[:min(len(got), room)]
		full := shards[:0:0]
		s.mu.Lock()
		for _, shard := range shards {
			if c := s.cursors[shard]; c != nil {
				c.advance(after[shard], n[shard] >= limit, kept[shard], last[shard])
			}
			if n[shard] >= limit {
				full = append(full, shard)
			}
		}
		s.mu.Unlock()
		out, room, shards = append(out, got...), room-len(got), full
	}
	return out, dbNow, nil
}

// Sweep makes the next claim sweep every shard from the front: the
// fetcher just registered as a waiter, and a commit made while it was not
// registered notified nobody and may lie below a shard's position.
func (s *shardLeases) Sweep() {
	s.mu.Lock()
	s.sweepNext = true
	s.mu.Unlock()
}

// Due sweeps every shard and forgets the aggregates waiting for a row
// written back pending (see Settled): one of them may be due now. The
// read's prev probe still holds back a row whose predecessor waits.
func (s *shardLeases) Due() {
	s.mu.Lock()
	s.sweepNext = true
	clear(s.waiting)
	s.mu.Unlock()
}

// isolate writes, before any of them goes out, the declaration of each
// message an isolated shard is to deliver alone (see
// membership.isolation). It returns the rows to deliver, at most batch,
// all of shards still held.
func (s *shardLeases) isolate(ctx context.Context, shards []int, tokens map[int]int64, read []store.Row, batch int) ([]store.Row, error) {
	s.mu.Lock()
	writes, rows, ended := s.members.isolation(shards, tokens, read, batch)
	s.mu.Unlock()
	if len(writes) == 0 {
		return nil, nil
	}
	written, err := s.store.Isolate(ctx, s.pool, s.cfg.Owner, writes)
	if err != nil {
		return nil, err
	}
	kept := make(map[int]bool, len(written))
	for _, shard := range written {
		kept[shard] = true
	}
	s.mu.Lock()
	s.members.isolatedWritten(written, ended)
	s.mu.Unlock()
	out := rows[:0]
	for _, r := range rows {
		if kept[r.Shard] {
			out = append(out, r)
		}
	}
	return out, nil
}

// Deadline is when rows read now stop being trusted: the shard leases
// were last extended by the renewal sent at renewedAt.
func (s *shardLeases) Deadline(time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewedAt.Add(s.cfg.trusted())
}

// Finalize writes the outcomes fenced on the tokens of their shards, each
// looked up among the ids in flight. A write whose id is no longer in
// flight under its token (its shard was given up while its publish hung)
// is not sent: its shard is no longer held under that token, so it would
// not hold.
func (s *shardLeases) Finalize(ctx context.Context, writes []store.RowWrite) ([]bool, error) {
	held := make([]bool, len(writes))
	send := make([]store.RowWrite, 0, len(writes))
	at := make([]int, 0, len(writes))
	s.mu.Lock()
	for i, w := range writes {
		if l, ok := s.flight.of(w.ID); ok && l.Token == w.LeaseVersion {
			w.Shard = l.Shard
			send, at = append(send, w), append(at, i)
		}
	}
	s.mu.Unlock()
	if len(send) == 0 {
		return held, nil
	}
	written, err := s.store.FinalizeShards(ctx, s.pool, s.cfg.Owner, send)
	if err != nil {
		return nil, err
	}
	for k, i := range at {
		held[i] = written[k]
	}
	return held, nil
}

func (s *shardLeases) RenewEvery() time.Duration { return s.cfg.RenewEvery() }

func (s *shardLeases) Ordered() bool { return s.cfg.Ordered }

// Chained: ordered, a read returns the queue of an aggregate, delivered
// as a chain; unordered, every row it returns goes out at once.
func (s *shardLeases) Chained() bool { return s.cfg.Ordered }

// Undelivered, ordered, does not count rows blocked behind a dead head:
// the shard read never reads them.
func (s *shardLeases) Undelivered(ctx context.Context) (bool, error) {
	return s.store.Undelivered(ctx, s.pool, s.cfg.Ordered)
}

// lease stamps each row with the token its shard had when it was read,
// and records it in flight. Rows of a shard lost or given up since (the
// keeper runs beside the read) are dropped: they are no longer this
// dispatcher's to deliver.
func (s *shardLeases) lease(rows []store.Row, tokens map[int]int64) []store.Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaseLocked(rows, tokens, nil)
}

// leaseLocked is lease with s.mu held; dropped, when set, is told of each
// row dropped.
func (s *shardLeases) leaseLocked(rows []store.Row, tokens map[int]int64, dropped func(id int64)) []store.Row {
	kept := rows[:0]
	for _, r := range rows {
		token, ok := tokens[r.Shard]
		if !ok || !s.members.holds(r.Shard, token) {
			if dropped != nil {
				dropped(r.ID)
			}
			continue
		}
		r.LeaseVersion = token
		s.flight.add(r.ID, store.ShardLease{Shard: r.Shard, Token: token}, r.AggregateID)
		kept = append(kept, r)
	}
	return kept
}

// Settled forgets the ids of a finalized batch. A row written back
// pending lies behind its shard's cursor: the shard is swept when it is
// due again. Ordered, its aggregate is not read until then; the aggregate
// of a row gone dead, or of one forgotten unwritten (its chain could not
// take it), is not read until the next sweep, which looks again.
func (s *shardLeases) Settled(writes []store.RowWrite) {
	now := s.cfg.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range writes {
		l, ok := s.flight.of(w.ID)
		if !ok || l.Token != w.LeaseVersion {
			continue
		}
		if w.Status == store.StatusPending {
			s.cursors.due(l.Shard, now.Add(w.Delay))
		}
		if s.cfg.Ordered {
			s.waitFor(s.flight.aggs[w.ID], w, now)
		}
	}
	s.flight.settle(writes)
}

// waitFor keeps the aggregate of a row settled as w from being read
// while it waits: for the retry, or for the next sweep.
func (s *shardLeases) waitFor(agg string, w store.RowWrite, now time.Time) {
	switch {
	case w.Status == store.StatusPending && w.Delay > 0:
		s.waiting.until(agg, now.Add(w.Delay))
	case w.Status == store.StatusDead || w.Status == "":
		s.waiting.until(agg, now.Add(s.cfg.PollInterval))
	}
}

// maintain renews the leases when due and, unless the run is stopping,
// takes or gives back shards towards a fair share of them. renewed reports
// a renewal (the leases then count from its start), gained that shards
// were taken.
func (s *shardLeases) maintain(ctx context.Context, balance bool) (renewed, gained bool, err error) {
	due, extra, err := s.due(ctx)
	if err != nil {
		return false, false, err
	}
	if len(extra) > 0 && balance {
		return false, false, s.releaseIdle(ctx, extra)
	}
	if !due {
		return false, false, nil
	}
	share, err := s.renew(ctx)
	if err != nil || !balance {
		return err == nil, false, err
	}
	gained, err = s.balance(ctx, share)
	return true, gained, err
}

// renew extends the leases held and returns this dispatcher's share.
func (s *shardLeases) renew(ctx context.Context) (share int, err error) {
	start := s.cfg.Clock.Now()
	s.mu.Lock()
	inFlight := len(s.flight.ids)
	s.mu.Unlock()
	held, alive, err := s.store.RenewShards(ctx, s.pool, s.cfg.Owner, s.cfg.Lease, inFlight)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renewedAt = start
	s.members.renewed(held)
	return fairShare(s.count, alive), nil
}

// balance gives back the shards beyond share or takes free ones up to it,
// then requeues what row leases left in the shards held.
func (s *shardLeases) balance(ctx context.Context, share int) (gained bool, err error) {
	s.mu.Lock()
	extra := s.members.extras(share, s.flight.busy())
	want := share - len(s.members.held)
	s.mu.Unlock()
	if len(extra) > 0 {
		return false, s.releaseIdle(ctx, extra)
	}
	if want > 0 {
		n, err := s.acquire(ctx, want)
		if err != nil {
			return n > 0, err
		}
		gained = n > 0
	}
	return gained, s.requeue(ctx)
}

// due reports whether the leases are to be renewed and balanced now (a
// renewal interval since the last renewal, or lookGap since it last
// looked and the look finds it short of its share), or, from that look,
// the shards to give back at once (see look).
func (s *shardLeases) due(ctx context.Context) (renew bool, extra []store.ShardLease, err error) {
	now := s.cfg.Clock.Now()
	poll := s.cfg.PollInterval
	s.mu.Lock()
	renewed, looked, held := now.Sub(s.renewedAt), now.Sub(s.lookedAt), len(s.members.held)
	if s.lookGap == 0 || len(s.flight.ids) > 0 {
		s.lookGap = poll
	}
	gap := s.lookGap
	s.mu.Unlock()
	switch {
	case renewed >= s.cfg.RenewEvery() || held == 0 && renewed >= poll:
		return true, nil, nil
	case looked < gap || renewed < poll:
		return false, nil, nil
	}
	s.mu.Lock()
	s.lookedAt = now
	s.mu.Unlock()
	free, alive, err := s.store.LookShards(ctx, s.pool, s.cfg.Owner, s.cfg.Lease)
	if err != nil {
		return false, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	renew, extra = look(&s.members, &s.flight, s.count, free, alive)
	// A look that finds the shares as they should be while nothing is in
	// flight comes later next time, up to IdlePollMax: a thousand idle
	// tables would otherwise count their shards a thousand times per poll
	// interval. A message in flight brings the looks back to every poll.
	if !renew && len(extra) == 0 && len(s.flight.ids) == 0 {
		s.lookGap = min(2*gap, max(s.cfg.IdlePollMax, poll))
	} else {
		s.lookGap = poll
	}
	return renew, extra, nil
}

// look decides what a look at the free shards and the members alive calls
// for: short of its share with shards free (a dispatcher that stopped
// released its shards and left), a renewal that acquires them; beyond its
// share (it took shards while the others were away, as after an outage,
// and they are back), giving back the shards beyond it with nothing in
// flight, and nothing more: a release is fenced on the token, while a
// renewal would also take shards, which waits for the renewal interval.
func look(m *membership, f *flight, count, free, alive int) (renew bool, extra []store.ShardLease) {
	share := fairShare(count, alive)
	held := len(m.held)
	if held > share {
		return false, m.extras(share, f.busy())
	}
	return held < share && free > 0, nil
}

// requeue takes over the rows of held shards that row leases left behind.
func (s *shardLeases) requeue(ctx context.Context) error {
	s.mu.Lock()
	shards := s.members.sorted()
	s.mu.Unlock()
	n, err := s.store.RequeueExpiredRows(ctx, s.pool, shards)
	if n > 0 {
		s.log.InfoContext(ctx, "rows left processing by row leases are pending again", slog.Int64("rows", n))
	}
	return err
}

// acquire takes up to n free shards and returns how many it took. A
// shard taken from an owner that died is isolated; the message that owner
// declared it was delivering alone was charged the crash, and goes dead
// once that uses up its attempts.
func (s *shardLeases) acquire(ctx context.Context, n int) (int, error) {
	got, err := s.store.AcquireShards(ctx, s.pool, s.cfg.Owner, s.cfg.Lease, n, s.cfg.Window)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, a := range got {
		if err := s.takeover(ctx, &a); err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		s.members.take(a)
		s.mu.Unlock()
	}
	return len(got), errors.Join(errs...)
}

// takeShard buries the message a takeover charged its last attempt, or
// logs the charge, and logs the isolation of a shard whose owner died.
func (s *shardLeases) takeShard(ctx context.Context, a *store.AcquiredShard) error {
	// A message to bury is written dead before its shard can be read: the
	// fetcher would otherwise deliver it once more meanwhile. If the write
	// fails, the shard is left unread until the next renewal lists it, and
	// the message goes out once more.
	if a.Attempts != nil && *a.Attempts >= s.cfg.MaxAttempts {
		if err := s.bury(ctx, *a); err != nil {
			return err
		}
	} else if a.Attempts != nil {
		s.log.WarnContext(ctx, "took over a shard whose owner died delivering this message alone: the crash counts as an attempt",
			slog.Int("shard", a.Shard), slog.Int64("outbox_id", *a.StrikeID), slog.Int("strikes", a.Strikes),
			slog.Int("attempts", *a.Attempts))
	}
	if a.IsolateThrough != nil && a.Attempts == nil {
		s.log.InfoContext(ctx, "took over a shard whose owner did not release it: delivering its first messages one at a time",
			slog.Int("shard", a.Shard), slog.Int64("through_id", *a.IsolateThrough))
	}
	return nil
}

// bury writes dead the message whose owners died delivering it alone until
// it had no attempt left.
func (s *shardLeases) bury(ctx context.Context, a store.AcquiredShard) error {
	msg := fmt.Sprintf("lease expired after max attempts: dispatcher died %d times delivering this message alone", a.Strikes)
	_, err := s.store.FinalizeShards(ctx, s.pool, s.cfg.Owner, []store.RowWrite{{
		ID: *a.StrikeID, Shard: a.Shard, LeaseVersion: a.Token, Status: store.StatusDead, Error: msg, Refund: true,
	}})
	if err == nil {
		s.cb.buried(ctx, *a.StrikeID, a.Token, errors.New(msg))
		s.log.ErrorContext(ctx, "message went dead: it crashed its dispatchers", slog.Int64("outbox_id", *a.StrikeID), slog.Int("strikes", a.Strikes))
	}
	return err
}

// release gives shards back. They leave membership before the release is
// sent: once it commits another dispatcher may take them and read their
// rows, and a read of this one's still under way must then hand none of
// them over (lease checks membership). If the release fails, a renewal
// that finds them still held takes them back.
func (s *shardLeases) release(ctx context.Context, leases []store.ShardLease) error {
	s.mu.Lock()
	s.members.drop(leases)
	s.mu.Unlock()
	_, err := s.store.ReleaseShards(ctx, s.pool, s.cfg.Owner, leases)
	return err
}

// releaseIdle gives back, of extras, the shards still held under their
// token with nothing in flight, checked as they leave membership: a read
// may have put messages of a shard in flight since extras were chosen.
func (s *shardLeases) releaseIdle(ctx context.Context, extras []store.ShardLease) error {
	s.mu.Lock()
	busy := s.flight.busy()
	idle := make([]store.ShardLease, 0, len(extras))
	for _, l := range extras {
		if !busy[l.Shard] && s.members.holds(l.Shard, l.Token) {
			idle = append(idle, l)
		}
	}
	s.members.drop(idle)
	s.mu.Unlock()
	if len(idle) == 0 {
		return nil
	}
	_, err := s.store.ReleaseShards(ctx, s.pool, s.cfg.Owner, idle)
	return err
}

// Close gives every held shard back and leaves the members, at shutdown
// once every verdict is written, so the others take the shards at once
// (their share grows) and strike nothing.
func (s *shardLeases) Close(ctx context.Context) error {
	s.mu.Lock()
	leases := s.members.leases()
	s.mu.Unlock()
	if len(leases) > 0 {
		if err := s.release(ctx, leases); err != nil {
			return err
		}
	}
	return s.store.LeaveShards(ctx, s.pool, s.cfg.Owner)
}

// Shares reports how many shards the dispatcher holds of the table's:
// its share of what the table sends (flow control's share of a limit).
func (s *shardLeases) Shares() (held, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.members.held), s.count
}
