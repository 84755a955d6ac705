package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
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
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	connected()
	d.listening.Store(true)
	d.signal() // anything inserted while we were not listening
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		d.stats.wakeups.Add(1)
		d.signal()
	}
}

func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}
