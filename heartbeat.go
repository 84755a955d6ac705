package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// heartbeat extends, every HeartbeatInterval, the leases of the rows whose
// publish has started, fenced on the lease version. A lease found lost
// cancels its publish; so does a lease whose deadline passes while
// heartbeats fail (the database is unreachable), since another worker may
// then take it.
type heartbeat struct {
	d      *Dispatcher
	leases *leaseRegistry
}

// run beats until ctx is done.
func (h *heartbeat) run(ctx context.Context) {
	t := time.NewTicker(h.d.cfg.HeartbeatInterval)
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
	d := h.d
	held, hung := h.beatable()
	if len(held) == 0 {
		if hung > 0 {
			d.hook.OnHeartbeat(HeartbeatEvent{Hung: hung})
		}
		return
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, d.cfg.HeartbeatInterval)
	extended, err := d.store.Heartbeat(hctx, d.pool, d.cfg.Owner, held, d.cfg.Lease)
	cancel()
	d.stats.heartbeats.Add(1)
	lost := 0
	for _, l := range held {
		switch {
		case err == nil && extended[l]:
			h.leases.extend(l, start.Add(d.cfg.Lease-d.cfg.Lease/10))
		case !h.leases.publishing(l):
			// The publish ended: its finalize may have written the row
			// since the snapshot, and it reports a lease that was lost.
		case err == nil, h.leases.untilDeadline(l) <= 0:
			lost++
			h.cancelPublish(l)
		}
	}
	if err != nil {
		d.log.Warn("heartbeat failed; publishes past their lease will be cancelled", slog.Any("error", err))
	}
	d.hook.OnHeartbeat(HeartbeatEvent{Rows: len(held), LeaseLost: lost, Hung: hung, Duration: time.Since(start), Err: err})
}

// beatable returns the leases the next heartbeat extends: all started
// publishes but those running past PublishTimeout plus one heartbeat
// interval, whose sink ignores its context. Those are left to their lease,
// so a healthy dispatcher takes the row over; hung counts the ones newly
// found.
func (h *heartbeat) beatable() (held []store.Lease, hung int) {
	d := h.d
	held, newlyHung := h.leases.beatable(time.Now().Add(-d.cfg.PublishTimeout - d.cfg.HeartbeatInterval))
	for _, l := range newlyHung {
		d.stats.hung.Add(1)
		d.log.Error("publish hung past its timeout (the sink ignores its context); no longer extending its lease",
			slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version),
			slog.Duration("publish_timeout", d.cfg.PublishTimeout))
	}
	return held, len(newlyHung)
}

func (h *heartbeat) cancelPublish(l store.Lease) {
	h.leases.cancel(l, ErrLeaseLost)
	h.d.log.Warn("lease lost during publish; cancelling it",
		slog.Int64("outbox_id", l.ID), slog.Int64("lease_version", l.Version))
}
