package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/store"
)

// heartbeat extends, every HeartbeatInterval, the leases of the rows whose
// publish has started, fenced on the lease version. A lease found lost
// cancels its publish; so does a lease whose deadline passes while
// heartbeats fail (the database is unreachable), since another worker may
// then take it.
type heartbeat struct {
	cfg    *Config
	store  *store.Store
	pool   *pgxpool.Pool
	stats  *counters
	hook   Hook
	log    *slog.Logger
	leases *leaseRegistry
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
	held, hung := h.beatable()
	if len(held) == 0 {
		if hung > 0 {
			h.hook.OnHeartbeat(HeartbeatEvent{Hung: hung})
		}
		return
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, h.cfg.HeartbeatInterval)
	extended, err := h.store.Heartbeat(hctx, h.pool, h.cfg.Owner, held, h.cfg.Lease)
	cancel()
	h.stats.heartbeats.Add(1)
	lost := 0
	for _, l := range held {
		switch {
		case err == nil && extended[l]:
			h.leases.extend(l, start.Add(h.cfg.Lease-h.cfg.Lease/10))
		case !h.leases.publishing(l):
			// The publish ended: its finalize may have written the row
			// since the snapshot, and it reports a lease that was lost.
		case err == nil, h.leases.untilDeadline(l) <= 0:
			lost++
			h.cancelPublish(l)
		}
	}
	if err != nil {
		h.log.Warn("heartbeat failed; publishes past their lease will be cancelled", slog.Any("error", err))
	}
	h.hook.OnHeartbeat(HeartbeatEvent{Rows: len(held), LeaseLost: lost, Hung: hung, Duration: time.Since(start), Err: err})
}

// beatable returns the leases the next heartbeat extends: all started
// publishes but those running past PublishTimeout plus one heartbeat
// interval, whose sink ignores its context. Those are left to their lease,
// so a healthy dispatcher takes the row over; hung counts the ones newly
// found.
func (h *heartbeat) beatable() (held []store.Lease, hung int) {
	held, newlyHung := h.leases.beatable(time.Now().Add(-h.cfg.PublishTimeout - h.cfg.HeartbeatInterval))
	for _, l := range newlyHung {
		h.stats.hung.Add(1)
		h.log.Error("publish hung past its timeout (the sink ignores its context); no longer extending its lease",
			slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version),
			slog.Duration("publish_timeout", h.cfg.PublishTimeout))
	}
	return held, len(newlyHung)
}

func (h *heartbeat) cancelPublish(l store.Lease) {
	h.leases.cancel(l, ErrLeaseLost)
	h.log.Warn("lease lost during publish; cancelling it",
		slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version))
}
