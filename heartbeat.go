package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/outboxd/outbox/internal/store"
)

// forget drops finalized rows from the heartbeat registry.
func (d *Dispatcher) forget(batch []result) {
	if d.cfg.HeartbeatInterval == 0 {
		return
	}
	d.flightsMu.Lock()
	for i := range batch {
		delete(d.flights, batch[i].job.lease())
	}
	d.flightsMu.Unlock()
}

// heartbeat extends, every HeartbeatInterval, the leases of the rows whose
// publish has started, fenced on the lease version. Rows still queued are
// not extended: another dispatcher may take them once their claim's lease
// runs out. A lease found lost cancels its publish; so does a lease whose
// deadline passes while heartbeats fail (the database is unreachable),
// since another worker may then take it.
func (d *Dispatcher) heartbeat(ctx context.Context) {
	t := time.NewTicker(d.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.beat(ctx)
	}
}

// beat runs one heartbeat statement over the flights worth extending.
func (d *Dispatcher) beat(ctx context.Context) {
	held, hung := d.beatable()
	if len(held) == 0 {
		if hung > 0 {
			d.hook.OnHeartbeat(HeartbeatEvent{Hung: hung})
		}
		return
	}
	leases := make([]store.Lease, len(held))
	for i, j := range held {
		leases[i] = j.lease()
	}
	start := time.Now()
	hctx, cancel := context.WithTimeout(ctx, d.cfg.HeartbeatInterval)
	extended, err := d.store.Heartbeat(hctx, d.pool, d.cfg.Owner, leases, d.cfg.Lease)
	cancel()
	d.stats.heartbeats.Add(1)
	lost := 0
	for _, j := range held {
		switch {
		case err == nil && extended[j.lease()]:
			j.setDeadline(start.Add(d.cfg.Lease - d.cfg.Lease/10))
		case j.phase.Load() != phasePublishing:
			// The publish ended: its finalize may have written the row
			// since the snapshot, and it reports a lease that was lost.
		case err == nil, j.untilDeadline() <= 0:
			lost++
			d.cancelFlight(j)
		}
	}
	if err != nil {
		d.log.Warn("heartbeat failed; publishes past their lease will be cancelled", slog.Any("error", err))
	}
	d.hook.OnHeartbeat(HeartbeatEvent{Rows: len(held), LeaseLost: lost, Hung: hung, Duration: time.Since(start), Err: err})
}

// beatable returns the flights whose leases the next heartbeat extends: all
// but publishes running past PublishTimeout plus one heartbeat interval,
// whose sink ignores its context. Those are left to their lease, so a
// healthy dispatcher takes the row over; hung counts the ones newly found.
func (d *Dispatcher) beatable() (held []*job, hung int) {
	hungBefore := time.Now().Add(-d.cfg.PublishTimeout - d.cfg.HeartbeatInterval).UnixNano()
	d.flightsMu.Lock()
	defer d.flightsMu.Unlock()
	held = make([]*job, 0, len(d.flights))
	for _, j := range d.flights {
		if j.hung.Load() {
			continue
		}
		if j.phase.Load() == phasePublishing && j.started.Load() < hungBefore {
			j.hung.Store(true)
			hung++
			d.stats.hung.Add(1)
			d.log.Error("publish hung past its timeout (the sink ignores its context); no longer extending its lease",
				slog.Int64("outbox_id", j.msg.ID), slog.Int64("lease_version", j.msg.FencingToken),
				slog.Duration("publish_timeout", d.cfg.PublishTimeout))
			continue
		}
		held = append(held, j)
	}
	return held, hung
}

func (d *Dispatcher) cancelFlight(j *job) {
	d.flightsMu.Lock()
	cancel := j.cancel
	d.flightsMu.Unlock()
	if cancel != nil {
		cancel(ErrLeaseLost)
	}
	d.log.Warn("lease lost during publish; cancelling it",
		slog.Int64("outbox_id", j.msg.ID), slog.Int64("lease_version", j.msg.FencingToken))
}
