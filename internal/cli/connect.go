package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// probeTimeout bounds the checks of one sink.
const probeTimeout = 15 * time.Second

// checkLine is one line of `config check --connect`.
type checkLine struct {
	subject string // "database", "table app.outbox", "sink URL"
	sinkutil.Check
}

// runConnectChecks connects to the database and every sink the
// configuration names, prints one line per check, and fails naming the
// checks that failed.
func runConnectChecks(ctx context.Context, e *env, s *runSetup) error {
	fmt.Fprintln(e.stdout, "connection checks:")
	var failed []string
	emit := func(l checkLine) {
		fmt.Fprintln(e.stdout, formatCheck(l))
		if l.Err != nil {
			failed = append(failed, l.subject+": "+l.What)
		}
	}
	for _, l := range databaseChecks(ctx, e, s) {
		emit(l)
	}
	for _, u := range s.sinkURLs() {
		subject := "sink " + maskSecret("sink", u)
		probe := sinkKinds[mustScheme(u)].probe
		if probe == nil {
			emit(checkLine{subject, sinkutil.Passed("nothing to connect to", "")})
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		for _, c := range probe(pctx, bareScheme(u)) {
			emit(checkLine{subject, c})
		}
		cancel()
	}
	if len(failed) > 0 {
		return fmt.Errorf("config check --connect: %d failed: %s", len(failed), strings.Join(failed, "; "))
	}
	fmt.Fprintln(e.stdout, "every connection check passed")
	return nil
}

func formatCheck(l checkLine) string {
	if l.Err != nil {
		msg := strings.Join(strings.Fields(l.Err.Error()), " ")
		return fmt.Sprintf("  FAIL  %s: %s: %s; fix: %s", l.subject, l.What, msg, l.Fix)
	}
	if l.Note != "" {
		return fmt.Sprintf("  ok    %s: %s (%s)", l.subject, l.What, l.Note)
	}
	return fmt.Sprintf("  ok    %s: %s", l.subject, l.What)
}

// sinkURLs lists every distinct sink URL the configuration uses, routes
// first, then the default.
func (s *runSetup) sinkURLs() []string {
	var out []string
	seen := map[string]bool{}
	add := func(u string) {
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	for _, r := range s.allRoutes() {
		add(r.Sink)
	}
	if s.hasDefaultSink() {
		add(s.rf.sink)
	}
	return out
}

// mustScheme returns the scheme of a URL config check has already
// validated.
func mustScheme(u string) string {
	scheme, _ := parseSinkURL(u)
	return scheme
}
