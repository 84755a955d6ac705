//go:build chaos

package chaos

import (
	"context"
	"strings"
	"time"
)

// rejectedLeases are the leases of group the webhook refused with an
// injected permanent answer (422).
func (r *run) rejectedLeases(group string) map[leaseKey]bool {
	out := map[leaseKey]bool{}
	for _, f := range r.rec.rejections() {
		if f.Group == group {
			out[leaseKey{f.ID, f.Token}] = true
		}
	}
	return out
}

// classFigures adds the counters the fault classes check beyond the
// delivery history: reads of a decoy waiters relation, and the ordered
// probe.
func (r *run) classFigures(ctx context.Context, g *group, c *counts) error {
	n, err := r.decoyReads(ctx, g)
	if err != nil {
		return err
	}
	if n > 0 {
		c.SearchPathCaptures = int(n)
		c.example("search_path_captures", "%s: the wake-up trigger read %s.%s_waiters %d times (a producer's search_path put it first)",
			g.table, g.decoy, g.name, n)
	}
	if p, ok := r.authHeal[g.name]; ok && p.Seconds > p.LimitSeconds {
		c.AuthHealLate = 1
		c.example("auth_heal_late", "%s: %d messages refused while every worker's credential was, delivered %.1f s after it healed (limit %.1f s)",
			g.table, p.Messages, p.Seconds, p.LimitSeconds)
	}
	if p, ok := r.probes[g.name]; ok && p.Seconds > p.LimitSeconds {
		c.OrderedProbeLate = 1
		c.example("ordered_probe_late", "%s: a burst of %d messages on one aggregate took %.1f s under run (limit %.1f s, poll interval %.1f s)",
			g.table, p.Messages, p.Seconds, p.LimitSeconds, p.PollSeconds)
	}
	return nil
}

// migrateFigures counts the `outboxd migrate` re-runs that failed while
// PostgreSQL was up (one overlapping a restart of the server may fail),
// and their durations.
func migrateFigures(events []event) (int, *pctiles) {
	var secs []float64
	failures := 0
	for _, e := range events {
		if e.Kind != faultMigrate {
			continue
		}
		secs = append(secs, e.End.Sub(e.Start).Seconds())
		if strings.HasPrefix(e.Detail, migrateDetailOK) || overlapsRestart(e, events) {
			continue
		}
		failures++
	}
	if len(secs) == 0 {
		return 0, nil
	}
	p := percentiles(secs)
	return failures, &p
}

func overlapsRestart(m event, events []event) bool {
	for _, e := range events {
		// A restart just before still refuses connections for a moment.
		if (e.Kind == faultPGRestart || e.Kind == faultFailover) && !e.End.Add(2*time.Second).Before(m.Start) && !e.Start.After(m.End) {
			return true
		}
	}
	return false
}

// producerStall is, for each `outboxd migrate` re-run, the longest
// producer transaction that overlapped it, in milliseconds: what a deploy's
// migrate costs the application.
func (r *run) producerStall(events []event) *pctiles {
	var spans []txSpan
	for _, g := range r.groups {
		g.led.mu.Lock()
		spans = append(spans, g.led.txs...)
		g.led.mu.Unlock()
	}
	var worst []float64
	for _, e := range events {
		if e.Kind != faultMigrate {
			continue
		}
		var w time.Duration
		for _, s := range spans {
			if !s.end.Before(e.Start) && !s.start.After(e.End) {
				w = max(w, s.end.Sub(s.start))
			}
		}
		worst = append(worst, float64(w.Milliseconds()))
	}
	if len(worst) == 0 {
		return nil
	}
	p := percentiles(worst)
	return &p
}
