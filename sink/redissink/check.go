package redissink

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Check connects to the server rawURL names and reports, in order: the URL
// is valid; the server is reachable, accepts the credentials and selects
// the database (one PING); the server has streams (Redis 5 or later).
// Streams are created by the first XADD, so there is no name to look up.
// It writes nothing.
func Check(ctx context.Context, rawURL string) []sinkutil.Check {
	s, checks, ok := sinkutil.StartChecks(rawURL, newDefault)
	if !ok {
		return checks
	}
	defer s.Close()
	reach := "server " + s.addr + " reachable and authenticated"
	if err := s.client.Ping(ctx).Err(); err != nil {
		fix := "start Redis there, or correct host and port in the URL"
		msg := err.Error()
		switch {
		case strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"),
			strings.Contains(msg, "invalid username-password"):
			fix = "correct the user and password in the URL (redis://user:password@host), or create that ACL user"
		case strings.Contains(msg, "DB index"):
			fix = "use a database number the server has (the URL path, /0 by default)"
		}
		return append(checks, sinkutil.Failed(reach, fmt.Errorf("redissink: %s", sinkutil.Scrub(msg, rawURL)), fix))
	}
	checks = append(checks, sinkutil.Passed(reach, ""))
	// XINFO HELP exists wherever streams do, and reads nothing.
	if err := s.client.Do(ctx, "XINFO", "HELP").Err(); err != nil {
		return append(checks, sinkutil.Failed("streams supported", fmt.Errorf("redissink: %w", err),
			"use Redis 5 or later, and grant the user XADD (ACL +xadd +xinfo)"))
	}
	note := fmt.Sprintf("stream %q is created by the first XADD", s.stream.String())
	if !s.stream.Fixed() {
		note = sinkutil.TemplateNote("stream", s.stream.String()) + "; XADD creates each"
	}
	return append(checks, sinkutil.Passed("streams supported", note))
}

// newDefault is New with all default options.
func newDefault(rawURL string) (*Sink, error) { return New(rawURL, nil) }
