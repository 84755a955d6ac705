package lease

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/service"
	"github.com/outboxd/outbox/internal/store"
)

// heartbeat extends, every HeartbeatInterval, the leases of the rows whose
// publish has started, fenced on the lease version. A lease found lost
// cancels its publish; so does a lease whose deadline passes while
// heartbeats fail (the database is unreachable), since another worker may
// then take it.
type heartbeat struct {
	store  *store.Store
	pool   *pgxpool.Pool
	cfg    Config
	cb     Callbacks
	log    *slog.Logger
	leases *Registry
	// down follows a run of failed heartbeats, so an outage is logged as
	// it begins, once a minute, and as it ends.
	down service.Outage
}

// run beats until ctx is done.
func (h *heartbeat) run(ctx context.Context) {
	t := time.NewTicker(h.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.beat(ctx)
	}
}

// beat runs one heartbeat statement over the leases worth extending.
func (h *heartbeat) beat(ctx context.Context) {
	hung := h.markHung()
	held := h.leases.Beatable()
	if len(held) == 0 {
		if hung > 0 {
			h.cb.beat(Beat{Hung: hung, Idle: true})
		}
		return
	}
	start := h.cfg.Clock.Now()
	hctx, cancel := context.WithTimeout(ctx, h.cfg.HeartbeatInterval)
	extended, err := h.store.Heartbeat(hctx, h.pool, h.cfg.Owner, held, h.cfg.Lease)
	cancel()
	lost := 0
	for _, l := range held {
		switch {
		case err == nil && extended[l]:
			h.leases.Extend(l, start.Add(h.cfg.trusted()))
		case !h.leases.Publishing(l):
			// The publish ended: its finalize may have written the row
			// since the snapshot, and it reports a lease that was lost.
		case err == nil, h.leases.UntilDeadline(l) <= 0:
			lost++
			h.leases.Cancel(l, ErrLost)
			h.log.Warn("lease lost during publish; cancelling it",
				slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version))
		}
	}
	if err != nil {
		// Warn at most: a claim failing for the same cause says it louder.
		level := h.down.Failed(h.cfg.Clock.Now(), err, slog.LevelWarn)
		h.log.Log(ctx, level, "heartbeat failed; publishes past their lease will be cancelled", slog.Any("error", err))
	} else if took, tries, ended := h.down.Recovered(h.cfg.Clock.Now()); ended {
		h.log.InfoContext(ctx, "heartbeats succeed again", slog.Duration("failing_for", took), slog.Int("failed_heartbeats", tries))
	}
	h.cb.beat(Beat{Rows: len(held), LeaseLost: lost, Hung: hung, Duration: h.cfg.Clock.Since(start), Err: err})
}

// markHung stops extending the leases of publishes running past
// PublishTimeout plus one heartbeat interval, whose sink ignores its
// context: they are left to their lease, so a healthy dispatcher takes the
// row over. It returns how many it newly found.
func (h *heartbeat) markHung() int {
	newly := h.leases.MarkHung(h.cfg.Clock.Now().Add(-h.cfg.PublishTimeout - h.cfg.HeartbeatInterval))
	for _, l := range newly {
		h.cb.hung(l)
		h.log.Error("publish hung past its timeout (the sink ignores its context); no longer extending its lease",
			slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version),
			slog.Duration("publish_timeout", h.cfg.PublishTimeout))
	}
	return len(newly)
}
