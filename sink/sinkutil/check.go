package sinkutil

import "strings"

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

// StartChecks begins a sink's Check: it parses rawURL with parse and
// returns the parsed value with the URL check. When parsing fails, ok is
// false and checks holds the failed URL check alone, to be returned as
// they are.
func StartChecks[C any](rawURL string, parse func(string) (C, error)) (c C, checks []Check, ok bool) {
	c, err := parse(rawURL)
	return c, []Check{URLCheck(err)}, err == nil
}
