package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxd/outbox/internal/store"
)

// listen keeps a dedicated connection LISTENing on the table's channel and
// turns notifications into wake-ups. It never stops delivery: while it is
// down the dispatcher polls, and it reconnects with backoff.
func (d *Dispatcher) listen(ctx context.Context, channel string) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := d.listenOnce(ctx, channel, func() { backoff = 100 * time.Millisecond })
		d.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("listener failed; polling until it reconnects",
			slog.Any("error", err), slog.Duration("retry_in", backoff))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context, channel string, connected func()) error {
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, store.Listen(channel)); err != nil {
		return err
	}
	connected()
	d.listening.Store(true)
	// Anything inserted, or made due (retry now), while we were not
	// listening: the next claim looks again everywhere.
	d.due.Store(true)
	d.signal()
	if !d.probed.Swap(true) {
		if err := d.probe(ctx, conn, channel); err != nil {
			return err
		}
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		d.notified(n.Payload)
	}
}

// notified wakes the fetcher for a notification; one saying messages were
// made due earlier (store.NotifyDue) also makes its next claim look again
// at what the dispatcher knows to wait.
func (d *Dispatcher) notified(payload string) {
	if payload == store.NotifyDue {
		d.due.Store(true)
	}
	d.stats.wakeups.Add(1)
	d.signal()
}

// probeTimeout bounds the wait for the listener's own probe notification.
const probeTimeout = 2 * time.Second

// probe checks, once per dispatcher, that the channel's notifications
// arrive (see probeNotifications); others arriving meanwhile are wake-ups
// as usual.
func (d *Dispatcher) probe(ctx context.Context, conn *pgx.Conn, channel string) error {
	return probeNotifications(ctx, conn, d.pool, channel, "outboxd-probe-"+d.cfg.Owner, d.log, d.cfg.PollInterval,
		func(_, payload string) { d.notified(payload) })
}

// probeNotifications sends payload on channel from another session, as a
// producer would, and waits for it on conn, which LISTENs there; other
// notifications arriving meanwhile go to other. Behind a transaction
// pooler LISTEN succeeds but notifications never come back: the relay
// then only polls, which is said once, with the fix.
func probeNotifications(ctx context.Context, conn *pgx.Conn, db store.DB, channel, payload string, log *slog.Logger,
	poll time.Duration, other func(channel, payload string)) error {
	if err := store.Notify(ctx, db, channel, payload); err != nil {
		log.WarnContext(ctx, "could not send the notification probe", slog.Any("error", err))
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(pctx)
		if err != nil {
			if ctx.Err() != nil || pctx.Err() == nil {
				return err
			}
			attrs := []any{slog.String("channel", channel), slog.Duration("waited", probeTimeout)}
			if poll > 0 {
				attrs = append(attrs, slog.Duration("poll_interval", poll))
			}
			log.WarnContext(ctx, "notifications do not arrive (a transaction pooler such as PgBouncer in transaction mode?): "+
				"the relay falls back to polling every poll interval; connect the dispatcher to the server directly "+
				"or through session pooling, or run with --no-notify (DisableNotify) to say so", attrs...)
			// Listening goes on: should notifications start to arrive,
			// they wake the dispatcher.
			return nil
		}
		if n.Payload == payload {
			log.DebugContext(ctx, "notification probe arrived", slog.String("channel", channel))
			return nil
		}
		other(n.Channel, n.Payload)
	}
}

func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}
