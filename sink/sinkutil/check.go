package sinkutil

import (
	"errors"
	"io"
	"strings"
)

// Check is the outcome of one connectivity check of a sink, as `outboxd
// config check --connect` reports it. Every sink package has a Check(ctx,
// rawURL) function returning its checks in order; a check that cannot run
// because an earlier one failed is left out. Checks have no side effect on
// the destination: they connect, authenticate and look up names, and never
// publish.
type Check struct {
	// What names what was checked, e.g. "broker reachable and
	// authenticated" or `stream for subject "outbox.>" present`.
	What string
	// Err is nil when the check passed. Its text never holds a credential.
	Err error
	// Fix says how to fix a failure, in one sentence; empty when it passed.
	Fix string
	// Note is detail shown for a check that passed (a server version, why
	// a name could not be looked up); may be empty.
	Note string
}

// Failed returns a failed check.
func Failed(what string, err error, fix string) Check { return Check{What: what, Err: err, Fix: fix} }

// Passed returns a passed check with an optional note.
func Passed(what, note string) Check { return Check{What: what, Note: note} }

// URLCheck is the first check of every sink: that its URL parses. It
// passes when err is nil.
func URLCheck(err error) Check {
	if err == nil {
		return Passed("URL valid", "")
	}
	return Failed("URL valid", err, "correct the URL; the sink's README lists its parameters")
}

// TemplateNote explains why a destination name holding placeholders is not
// looked up: its names are known only per message.
func TemplateNote(kind, name string) string {
	return kind + " " + quote(name) + " is a template: each name it expands to is checked at publish time"
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// RunChecks is the body of every sink's Check. It parses rawURL with parse
// and reports that as the first check, "URL valid"; when the URL is valid,
// it appends the checks run makes of the parsed value: the sink's own, in
// order, ending with the first that failed. A parsed value that is an
// [io.Closer] (a sink built to check with) is closed once run returns.
func RunChecks[C any](rawURL string, parse func(string) (C, error), run func(C) []Check) []Check {
	c, err := parse(rawURL)
	checks := []Check{URLCheck(err)}
	if err != nil {
		return checks
	}
	if cl, ok := any(c).(io.Closer); ok {
		defer func() { _ = cl.Close() }()
	}
	return append(checks, run(c)...)
}

// ScrubErr is a client library's error as a sink's check reports it: its
// text after the sink's package prefix pkg ("natssink"), with whatever looks
// like a secret of the sink's URL rawURL replaced by [Redacted]. It does not
// wrap err, whose text may hold those secrets.
func ScrubErr(pkg string, err error, rawURL string) error {
	return errors.New(pkg + ": " + Scrub(err.Error(), rawURL))
}
