package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/store"
)

// shardLeases is the fetcher's and completer's side of [LeaseShards]: the
// shards this dispatcher holds and their tokens, its fair share, the ids
// in flight (pending in the table, so they must not be read again), and
// the shards taken over from an owner that died, which are delivered one
// message at a time, each declared before it goes out, up to the last
// message that owner can have had in flight (docs/shard-leases.md).
type shardLeases struct {
	cfg   *Config
	store *store.Store
	pool  *pgxpool.Pool
	stats *counters
	hook  Hook
	log   *slog.Logger
	wake  chan<- struct{} // wakes the fetcher when shards were taken
	count int             // the table's shards

	mu   sync.Mutex
	held map[int]int64 // shard → token
	// isolated maps each shard delivered one message at a time to the id
	// up to which it is.
	isolated map[int]int64
	inFlight map[int64]store.ShardLease // id → its shard and the token it was read under
	// abandoned are shards being given up because a publish of theirs
	// hung (hung holds those ids): they are read no more, and released
	// once nothing else of theirs is in flight.
	abandoned map[int]bool
	hung      map[int64]bool
	renewedAt time.Time
	// lookedAt is when the free shards were last counted, between renewals.
	lookedAt time.Time
}

func newShardLeases(d *Dispatcher, count int) *shardLeases {
	return &shardLeases{
		cfg: d.cfg, store: d.store, pool: d.pool, stats: &d.stats, hook: d.hook, log: d.log, wake: d.wake, count: count,
		held: map[int]int64{}, isolated: map[int]int64{},
		inFlight: map[int64]store.ShardLease{}, abandoned: map[int]bool{}, hung: map[int64]bool{}}
}

// claim reads the heads of the held shards: one per isolated shard with
// nothing in flight, declared before it is handed over, then up to batch
// rows of the others. clearWait drops the dispatcher's waiter row first,
// as a row claim does in its statement; the read that follows sees every
// commit the cleared row would have notified. The leases themselves are
// kept by the keeper, on its own schedule.
func (s *shardLeases) claim(ctx context.Context, batch int, clearWait bool) ([]store.Row, time.Time, error) {
	if clearWait {
		if err := s.store.Unwait(ctx, s.pool, s.cfg.Owner); err != nil {
			return nil, time.Time{}, err
		}
	}
	plain, isolated, exclude, tokens := s.readPlan()
	var rows []store.Row
	var now time.Time
	if len(isolated) > 0 {
		got, at, err := s.store.ReadShards(ctx, s.pool, s.cfg.Owner, leasesOf(isolated, tokens), exclude, 1)
		if err != nil {
			return nil, time.Time{}, err
		}
		if rows, err = s.isolate(ctx, isolated, tokens, got, batch); err != nil {
			return nil, time.Time{}, err
		}
		now = at
	}
	if room := batch - len(rows); room > 0 && len(plain) > 0 {
		got, at, err := s.store.ReadShards(ctx, s.pool, s.cfg.Owner, leasesOf(plain, tokens), exclude, (room+len(plain)-1)/len(plain))
		if err != nil {
			return nil, time.Time{}, err
		}
		rows, now = append(rows, got[:min(len(got), room)]...), at
	}
	return s.lease(rows, tokens), now, nil
}

// leasesOf pairs shards with the tokens they are held under.
func leasesOf(shards []int, tokens map[int]int64) []store.ShardLease {
	out := make([]store.ShardLease, len(shards))
	for i, shard := range shards {
		out[i] = store.ShardLease{Shard: shard, Token: tokens[shard]}
	}
	return out
}

// isolate writes, before any of them goes out, the declaration of each
// message an isolated shard is to deliver alone, and ends the isolation of
// shards whose next message lies beyond it (or that have none due): a
// message past isolate_through cannot have been in flight when the owner
// died. It returns the rows to deliver, at most batch, all of shards still
// held.
func (s *shardLeases) isolate(ctx context.Context, shards []int, tokens map[int]int64, read []store.Row, batch int) ([]store.Row, error) {
	byShard := make(map[int]store.Row, len(read))
	for _, r := range read {
		byShard[r.Shard] = r
	}
	var writes []store.Isolation
	var rows []store.Row
	ended := map[int]bool{}
	s.mu.Lock()
	for _, shard := range shards {
		r, ok := byShard[shard]
		l := store.ShardLease{Shard: shard, Token: tokens[shard]}
		switch {
		case !ok || r.ID > s.isolated[shard]:
			writes, ended[shard] = append(writes, store.Isolation{ShardLease: l}), true
			if ok && len(rows) < batch {
				rows = append(rows, r)
			}
		case len(rows) < batch:
			writes, rows = append(writes, store.Isolation{ShardLease: l, ID: &r.ID}), append(rows, r)
		}
	}
	s.mu.Unlock()
	if len(writes) == 0 {
		return nil, nil
	}
	written, err := s.store.Isolate(ctx, s.pool, s.cfg.Owner, writes)
	if err != nil {
		return nil, err
	}
	kept := map[int]bool{}
	s.mu.Lock()
	for _, shard := range written {
		kept[shard] = true
		if ended[shard] {
			delete(s.isolated, shard)
		}
	}
	s.mu.Unlock()
	return slices.DeleteFunc(rows, func(r store.Row) bool { return !kept[r.Shard] }), nil
}

// deadline is when rows read now stop being trusted: the shard leases
// were last extended by the renewal sent at renewedAt.
func (s *shardLeases) deadline(time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewedAt.Add(s.cfg.Lease - s.cfg.Lease/10)
}

func (s *shardLeases) finalize(ctx context.Context, writes []store.RowWrite) ([]bool, error) {
	return s.store.FinalizeShards(ctx, s.pool, s.cfg.Owner, writes)
}

func (s *shardLeases) ordered() bool { return true }

// undelivered does not count rows blocked behind a dead head: the shard
// read never reads them.
func (s *shardLeases) undelivered(ctx context.Context) (bool, error) {
	return s.store.Undelivered(ctx, s.pool, true)
}

// readPlan splits the held shards into those read normally and the
// isolated ones free to deliver their next message, lists the ids in
// flight, and notes each shard's token: the rows read are delivered under
// it.
func (s *shardLeases) readPlan() (plain, isolated []int, exclude []int64, tokens map[int]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tokens = maps.Clone(s.held)
	for id := range s.inFlight {
		exclude = append(exclude, id)
	}
	busy := s.busyLocked()
	for _, shard := range s.heldLocked() {
		if s.abandoned[shard] {
			continue
		}
		if _, ok := s.isolated[shard]; !ok {
			plain = append(plain, shard)
		} else if !busy[shard] {
			isolated = append(isolated, shard)
		}
	}
	return plain, isolated, exclude, tokens
}

// busyLocked is the set of shards with a message in flight; s.mu is held.
func (s *shardLeases) busyLocked() map[int]bool {
	busy := map[int]bool{}
	for _, l := range s.inFlight {
		busy[l.Shard] = true
	}
	return busy
}

// heldLocked is the held shards in order; s.mu is held.
func (s *shardLeases) heldLocked() []int {
	shards := make([]int, 0, len(s.held))
	for shard := range s.held {
		shards = append(shards, shard)
	}
	slices.Sort(shards)
	return shards
}

// lease stamps each row with the token its shard had when it was read,
// and records it in flight. Rows of a shard lost or given up since (the
// keeper runs beside the read) are dropped: they are no longer this
// dispatcher's to deliver.
func (s *shardLeases) lease(rows []store.Row, tokens map[int]int64) []store.Row {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := rows[:0]
	for _, r := range rows {
		token, ok := tokens[r.Shard]
		if !ok || s.held[r.Shard] != token {
			continue
		}
		r.LeaseVersion = token
		s.inFlight[r.ID] = store.ShardLease{Shard: r.Shard, Token: token}
		kept = append(kept, r)
	}
	return kept
}

// settled forgets the ids of a finalized batch (written or not: a row left
// pending is read again).
func (s *shardLeases) settled(writes []store.RowWrite) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range writes {
		// A hung publish given up may end after its row was read again:
		// its verdict must not forget the new read.
		if l, ok := s.inFlight[w.ID]; ok && l.Token == w.LeaseVersion {
			delete(s.inFlight, w.ID)
		}
		delete(s.hung, w.ID)
	}
}

// maintain renews the leases when due and, unless the run is stopping,
// takes or gives back shards towards ceil(shards / dispatchers alive).
// renewed reports a renewal (the leases then count from its start), gained
// that shards were taken.
func (s *shardLeases) maintain(ctx context.Context, balance bool) (renewed, gained bool, err error) {
	due, err := s.due(ctx)
	if err != nil || !due {
		return false, false, err
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
	start := time.Now()
	s.mu.Lock()
	inFlight := len(s.inFlight)
	s.mu.Unlock()
	held, alive, err := s.store.RenewShards(ctx, s.pool, s.cfg.Owner, s.cfg.Lease, inFlight)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renewedAt = start
	s.held = map[int]int64{}
	for _, l := range held {
		s.held[l.Shard] = l.Token
	}
	for shard := range s.isolated {
		if _, ok := s.held[shard]; !ok {
			delete(s.isolated, shard) // lost: the new owner isolates it
		}
	}
	return (s.count + alive - 1) / alive, nil
}

// balance gives back the shards beyond share or takes free ones up to it,
// then requeues what row leases left in the shards held.
func (s *shardLeases) balance(ctx context.Context, share int) (gained bool, err error) {
	s.mu.Lock()
	extra := s.extras(share)
	want := share - len(s.held)
	s.mu.Unlock()
	if len(extra) > 0 {
		return false, s.release(ctx, extra)
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

// due reports whether the leases are to be renewed and balanced now: a
// renewal interval since the last renewal, or, for a dispatcher holding
// fewer than every shard, a poll interval since it last looked and shards
// free (a dispatcher that stopped released its shards and left).
func (s *shardLeases) due(ctx context.Context) (bool, error) {
	s.mu.Lock()
	renewed, looked, held := time.Since(s.renewedAt), time.Since(s.lookedAt), len(s.held)
	s.mu.Unlock()
	poll := s.cfg.PollInterval
	switch {
	case renewed >= s.cfg.renewEvery() || held == 0 && renewed >= poll:
		return true, nil
	case held == s.count || looked < poll || renewed < poll:
		return false, nil
	}
	s.mu.Lock()
	s.lookedAt = time.Now()
	s.mu.Unlock()
	free, err := s.store.FreeShards(ctx, s.pool)
	return free > 0, err
}

// requeue takes over the rows of held shards that row leases left behind.
func (s *shardLeases) requeue(ctx context.Context) error {
	s.mu.Lock()
	shards := s.heldLocked()
	s.mu.Unlock()
	n, err := s.store.RequeueExpiredRows(ctx, s.pool, shards)
	if n > 0 {
		s.log.InfoContext(ctx, "rows left processing by row leases are pending again", slog.Int64("rows", n))
	}
	return err
}

// extras are held shards beyond share with nothing in flight, highest
// first; s.mu is held.
func (s *shardLeases) extras(share int) []store.ShardLease {
	busy := s.busyLocked()
	var out []store.ShardLease
	shards := s.heldLocked()
	for i := len(shards) - 1; i >= 0 && len(s.held)-len(out) > share; i-- {
		if !busy[shards[i]] {
			out = append(out, store.ShardLease{Shard: shards[i], Token: s.held[shards[i]]})
		}
	}
	return out
}

// acquire takes up to n free shards and returns how many it took. A
// shard taken from an owner that died is isolated; the message that owner
// declared it was delivering alone was charged the crash, and goes dead
// once that uses up its attempts.
func (s *shardLeases) acquire(ctx context.Context, n int) (int, error) {
	window := 2*s.cfg.BatchSize + s.cfg.Workers // what one dispatcher may hold in flight
	got, err := s.store.AcquireShards(ctx, s.pool, s.cfg.Owner, s.cfg.Lease, n, window)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, a := range got {
		// A message to bury is written dead before its shard can be read:
		// the fetcher would otherwise deliver it once more meanwhile. If
		// the write fails, the shard is left unread until the next
		// renewal lists it, and the message goes out once more.
		if a.Attempts != nil && *a.Attempts >= s.cfg.MaxAttempts {
			if err := s.bury(ctx, a); err != nil {
				errs = append(errs, err)
				continue
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
		s.mu.Lock()
		s.held[a.Shard] = a.Token
		if a.IsolateThrough != nil {
			s.isolated[a.Shard] = *a.IsolateThrough
		}
		s.mu.Unlock()
	}
	return len(got), errors.Join(errs...)
}

// bury writes dead the message whose owners died delivering it alone until
// it had no attempt left.
func (s *shardLeases) bury(ctx context.Context, a store.AcquiredShard) error {
	msg := fmt.Sprintf("lease expired after max attempts: dispatcher died %d times delivering this message alone", a.Strikes)
	_, err := s.store.FinalizeShards(ctx, s.pool, s.cfg.Owner, []store.RowWrite{{
		ID: *a.StrikeID, Shard: a.Shard, LeaseVersion: a.Token, Status: store.StatusDead, Error: msg, Refund: true,
	}})
	if err == nil {
		s.hook.OnSettle(SettleEvent{Message: s.buried(ctx, *a.StrikeID, a.Token), Outcome: OutcomeDead, Err: errors.New(msg)})
		s.stats.count(OutcomeDead)
		s.log.ErrorContext(ctx, "message went dead: it crashed its dispatchers", slog.Int64("outbox_id", *a.StrikeID), slog.Int("strikes", a.Strikes))
	}
	return err
}

// buried is the message a bury wrote dead, as the hook sees every settled
// one: read back, or its id and token alone if the read fails.
func (s *shardLeases) buried(ctx context.Context, id, token int64) *Message {
	m := &Message{ID: id, IDNamespace: s.cfg.IDNamespace, FencingToken: token}
	if det, err := s.store.Message(ctx, s.pool, id); err == nil {
		m.AggregateType, m.AggregateID, m.EventType = det.AggregateType, det.AggregateID, det.EventType
		m.Payload, m.CreatedAt, m.Attempt, m.Headers = det.Payload, det.CreatedAt, det.Attempts, det.Headers
	}
	return m
}

func (s *shardLeases) release(ctx context.Context, leases []store.ShardLease) error {
	_, err := s.store.ReleaseShards(ctx, s.pool, s.cfg.Owner, leases)
	s.mu.Lock()
	for _, l := range leases {
		delete(s.held, l.Shard)
		delete(s.isolated, l.Shard)
	}
	s.mu.Unlock()
	return err
}

// close gives every held shard back and leaves the members, at
// shutdown once every verdict is written, so the others take the shards at
// once (their share grows) and strike nothing.
func (s *shardLeases) close(ctx context.Context) error {
	s.mu.Lock()
	leases := make([]store.ShardLease, 0, len(s.held))
	for shard, token := range s.held {
		leases = append(leases, store.ShardLease{Shard: shard, Token: token})
	}
	s.mu.Unlock()
	if len(leases) > 0 {
		if err := s.release(ctx, leases); err != nil {
			return err
		}
	}
	return s.store.LeaveShards(ctx, s.pool, s.cfg.Owner)
}
