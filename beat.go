package outbox

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/outboxd/outbox/internal/lease"
	"github.com/outboxd/outbox/internal/store"
)

// beater reports the dispatcher in the dispatchers table while it runs
// (idle or busy), so status and the console list every live dispatcher:
// what it holds and how many it delivered in the last minute. A beat that
// fails is logged once until one succeeds; the relay does not depend on
// it.
type beater struct {
	d      *Dispatcher
	leases *lease.Registry
	// base is what every beat reports; base.Every is the interval.
	base store.Beat
	// window holds the delivered count at each beat of the last minute.
	window  rateWindow
	failing bool
	// wrote is when the last beat was written, and quiet whether it
	// reported the dispatcher idle.
	wrote time.Time
	quiet bool
}

// idleBeats is how many beats an idle dispatcher lets pass between the
// beats it writes: a thousand idle tables would otherwise write a hundred
// rows a second. Its row says so (the beat's interval), so it is listed as
// live for three of these longer beats.
const idleBeats = 6

// beatEvery is how often a dispatcher reports itself: a third of its
// lease, between one and ten seconds. Live means seen within three beats.
func beatEvery(lease time.Duration) time.Duration {
	return min(max(lease/3, time.Second), 10*time.Second)
}

func (d *Dispatcher) newBeater(leases *lease.Registry) *beater {
	host, _ := os.Hostname()
	return &beater{d: d, leases: leases, base: store.Beat{
		Owner: d.cfg.Owner, Host: host, Version: buildVersion(), LeaseMode: string(d.cfg.LeaseMode),
		Every: beatEvery(d.cfg.Lease),
	}}
}

// run beats at once, then every interval until ctx ends, then deletes the
// dispatcher's row.
func (b *beater) run(ctx context.Context) {
	t := time.NewTicker(b.base.Every)
	defer t.Stop()
	for first := true; ; first = false {
		b.beat(ctx, first)
		select {
		case <-ctx.Done():
			leave, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := b.d.store.Leave(leave, b.d.pool, b.d.cfg.Owner); err != nil {
				b.d.log.Debug("could not delete the dispatcher's row; it stops being listed within three beats", slog.Any("error", err))
			}
			return
		case <-t.C:
		}
	}
}

func (b *beater) beat(ctx context.Context, first bool) {
	now := time.Now()
	done := b.d.stats.of(OutcomeDone)
	beat := b.base
	beat.First, beat.InFlight, beat.Delivered1m = first, b.leases.Len(), b.window.add(now, done)
	beat.Flow = b.d.flowJSON()
	quiet := beat.InFlight == 0 && beat.Delivered1m == 0
	if quiet {
		if !first && b.quiet && !b.failing && now.Sub(b.wrote) < (idleBeats-1)*b.base.Every {
			return
		}
		beat.Every = idleBeats * b.base.Every
	}
	b.wrote, b.quiet = now, quiet
	bctx, cancel := context.WithTimeout(ctx, b.base.Every)
	defer cancel()
	err := b.d.store.Beat(bctx, b.d.pool, beat)
	switch {
	case err != nil && ctx.Err() == nil && !b.failing:
		b.failing = true
		b.d.log.Warn("could not report the dispatcher in the dispatchers table; status and the console will not list it",
			slog.Any("error", err))
	case err == nil && b.failing:
		b.failing = false
		b.d.log.Info("dispatcher reported in the dispatchers table again")
	}
}

// rateWindow turns a growing count into how much it grew over the last
// minute, from the samples of the last minute.
type rateWindow struct {
	samples []rateSample
}

type rateSample struct {
	at time.Time
	n  int64
}

// add records n at now and returns n less the oldest sample of the last
// minute (less the first sample while the window is younger than that).
func (w *rateWindow) add(now time.Time, n int64) int64 {
	w.samples = append(w.samples, rateSample{now, n})
	cut := 0
	for cut < len(w.samples)-1 && now.Sub(w.samples[cut+1].at) >= time.Minute {
		cut++
	}
	w.samples = w.samples[cut:]
	return n - w.samples[0].n
}

// buildVersion is the version of the module the binary was built from:
// its tag, or the development build's commit.
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if bi.Main.Path != "github.com/outboxd/outbox" {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/outboxd/outbox" {
				v = dep.Version
			}
		}
	}
	if v == "" || v == "(devel)" {
		v = "devel"
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v
}
