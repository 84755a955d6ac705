package outbox

import (
	"context"

	"github.com/outboxd/outbox/internal/service"
)

// startService runs fn in the background, the one shape of every service a
// dispatcher runs beside its stages (the listener, the heartbeat): fn runs
// until its context is cancelled and returns when it has cleaned up. The
// returned stop cancels that context and waits for fn to return.
func startService(ctx context.Context, fn func(context.Context)) (stop func()) {
	var r service.Runner
	// A fresh Runner always starts.
	_ = r.Start(ctx, func(ctx context.Context) error { fn(ctx); return nil })
	return func() { _ = r.Stop() }
}

// stopService stops a service started with startService; nil is a service
// that was never started.
func stopService(stop func()) {
	if stop != nil {
		stop()
	}
}
