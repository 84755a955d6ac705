package lease

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/internal/store"
)

// Keeper renews the shard leases on their own schedule, whatever the
// fetcher does: a dispatcher whose workers are all busy with slow publishes
// claims nothing for a while, and must keep its shards all the same. After
// each renewal the rows in flight are trusted until the new lease's end,
// queued ones included (the shard, not the row, is what is leased); those
// of a shard that was lost have their publishes cancelled. run is the
// dispatcher's run: once it is stopping, the keeper renews but no longer
// takes shards.
func (s *shardLeases) Keeper(run context.Context) func(context.Context) {
	return func(ctx context.Context) {
		service.Every(ctx, s.tick(), func() {
			// A turn is not cut short when the keeper stops: an acquire
			// cut off after the server committed it would leave shards
			// this dispatcher holds without knowing it, which its stop
			// then does not release.
			turn, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.cfg.RenewEvery(), time.Second))
			defer cancel()
			s.keep(turn, run.Err() == nil)
		})
	}
}

// tick is how often the keeper looks: often enough to renew on time and
// to notice free shards within a poll interval.
func (s *shardLeases) tick() time.Duration {
	return max(min(s.cfg.PollInterval, s.cfg.RenewEvery()/4), time.Millisecond)
}

// keep runs one turn of the keeper.
func (s *shardLeases) keep(ctx context.Context, balance bool) {
	leases := s.leases
	start := s.cfg.Clock.Now()
	renewed, gained, err := s.maintain(ctx, balance)
	if gained {
		// Rows of the new shards are waiting: read them now, not at
		// the next poll.
		s.cb.taken()
	}
	if err != nil {
		// Warn at most: a claim failing for the same cause says it louder.
		level := s.down.Failed(s.cfg.Clock.Now(), err, slog.LevelWarn)
		s.log.Log(ctx, level, "shard renewal failed; publishes past their lease will be cancelled", slog.Any("error", err))
		for _, l := range leases.Overdue() {
			leases.Cancel(l, ErrLost)
		}
	}
	s.abandonHung(ctx)
	if !renewed {
		return
	}
	if err == nil {
		if took, tries, ended := s.down.Recovered(s.cfg.Clock.Now()); ended {
			s.log.InfoContext(ctx, "shard renewals succeed again", slog.Duration("failing_for", took), slog.Int("failed_renewals", tries))
		}
	}
	kept, lost := leases.Renew(start.Add(s.cfg.trusted()), s.holds)
	for _, l := range lost {
		if leases.Cancel(l, ErrLost) {
			s.log.Warn("shard lease lost during publish; cancelling it",
				slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version))
		}
	}
	s.cb.beat(Beat{Rows: kept, LeaseLost: len(lost), Duration: s.cfg.Clock.Since(start), Err: err})
}

// holds reports whether the lease of a row in flight still holds: its
// shard is held under the token it was read with.
func (s *shardLeases) holds(l store.Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.flight.of(l.ID)
	return ok && r.Token == l.Version && s.members.holds(r.Shard, l.Version)
}

// abandonHung gives up the shards of publishes hung past PublishTimeout
// and a renewal interval (a sink that ignores its context): under row
// leases such a row's lease runs out and another dispatcher takes it, but
// a shard's lease is kept for all its rows, so the hung message would hold
// its aggregate until the dispatcher restarts. Its shard is read no more
// and, once nothing else of it is in flight, released: whoever takes it
// next, under a new token, delivers the message again, and the hung
// publish's late finalize is fenced off.
func (s *shardLeases) abandonHung(ctx context.Context) {
	newly := s.leases.MarkHung(s.cfg.Clock.Now().Add(-s.cfg.PublishTimeout - s.cfg.RenewEvery()))
	for _, l := range newly {
		s.cb.hung(l)
		s.log.Error("publish hung past its timeout (the sink ignores its context); giving its shard up",
			slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version),
			slog.Duration("publish_timeout", s.cfg.PublishTimeout))
	}
	s.mu.Lock()
	s.flight.markHung(newly)
	if s.hung != nil && len(newly) > 0 {
		s.hung(newly)
	}
	release := giveUpHung(&s.members, &s.flight)
	s.mu.Unlock()
	if len(release) > 0 {
		if _, err := s.store.ReleaseShards(ctx, s.pool, s.cfg.Owner, release); err != nil {
			s.log.WarnContext(ctx, "could not give up a shard; it passes on when its lease ends", slog.Any("error", err))
		}
	}
}

// giveUpHung takes out of both the shards whose only messages in flight
// are hung publishes, and returns those held, to be released. They leave
// membership at once, with their ids, so that no read planned from here on
// reads them, and a read already under way hands none of their rows over:
// the hung message, no longer in flight, would otherwise go out again under
// the very token its hung publish holds.
func giveUpHung(m *membership, f *flight) []store.ShardLease {
	var release []store.ShardLease
	for _, shard := range f.giveUp() {
		if token, ok := m.held[shard]; ok {
			release = append(release, store.ShardLease{Shard: shard, Token: token})
		}
	}
	m.drop(release)
	return release
}
