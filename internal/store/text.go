package store

import (
	"strings"
	"unicode/utf8"
)

// Bounds on the texts the store writes. An error text is a diagnosis for an
// operator, so a few hundred bytes keep its head; an owner is a name chosen
// by configuration, compared on every fenced write.
const (
	maxErrorText = 500
	maxOwnerText = 200
)

// storable makes s safe for a text column, the one place every text the
// store writes passes through: PostgreSQL refuses a NUL byte (SQLSTATE
// 22021) and invalid UTF-8 in a UTF-8 database, and either would fail the
// whole batched statement the text rides in. NUL bytes are dropped, each
// run of invalid bytes becomes one U+FFFD, and the result is cut to at most n bytes.
func storable(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	return truncate(s, n)
}

// truncate cuts valid UTF-8 s to at most n bytes on a rune boundary, the
// ellipsis that marks the cut included.
func truncate(s string, n int) string {
	const ellipsis = "…"
	if len(s) <= n {
		return s
	}
	n -= len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// ownerText is how an owner name is written and compared: claims, fenced
// writes and waiter rows all pass the same name through here, so they agree.
func ownerText(owner string) string { return storable(owner, maxOwnerText) }

// OwnerText is owner as the tables store it (lease_owner, the dispatchers'
// rows).
func OwnerText(owner string) string { return ownerText(owner) }
