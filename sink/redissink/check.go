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
	return sinkutil.RunChecks(rawURL, newDefault, func(s *Sink) []sinkutil.Check {
		reach := "server " + s.addr + " reachable and authenticated"
		if err := s.client.Ping(ctx).Err(); err != nil {
			return []sinkutil.Check{sinkutil.Failed(reach, sinkutil.ScrubErr("redissink", err, rawURL), pingFix(err.Error()))}
		}
		return []sinkutil.Check{sinkutil.Passed(reach, ""), checkStreams(ctx, s)}
	})
}

// pingFix says how to fix a failed PING that answered msg.
func pingFix(msg string) string {
	switch {
	case strings.Contains(msg, "NOAUTH"), strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"),
		strings.Contains(msg, "invalid username-password"):
		return "correct the user and password in the URL (redis://user:password@host), or create that ACL user"
	case strings.Contains(msg, "DB index"):
		return "use a database number the server has (the URL path, /0 by default)"
	}
	return "start Redis there, or correct host and port in the URL"
}

// checkStreams asks for XINFO HELP, which exists wherever streams do and
// reads nothing.
func checkStreams(ctx context.Context, s *Sink) sinkutil.Check {
	if err := s.client.Do(ctx, "XINFO", "HELP").Err(); err != nil {
		return sinkutil.Failed("streams supported", fmt.Errorf("redissink: %w", err),
			"use Redis 5 or later, and grant the user XADD (ACL +xadd +xinfo)")
	}
	note := fmt.Sprintf("stream %q is created by the first XADD", s.stream.String())
	if !s.stream.Fixed() {
		note = sinkutil.TemplateNote("stream", s.stream.String()) + "; XADD creates each"
	}
	return sinkutil.Passed("streams supported", note)
}

// newDefault is New with all default options.
func newDefault(rawURL string) (*Sink, error) { return New(rawURL, nil) }
