package store_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outboxd/outbox/internal/store"
)

// FuzzParseTable: any accepted name yields statements in which the name
// appears only as quoted identifiers (no way out of the quotes).
func FuzzParseTable(f *testing.F) {
	for _, s := range []string{"outbox", "app.outbox", `x"; DROP TABLE y; --`, "a.b.c", ".x", "x.", "$$", "{{table}}", "é.ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tbl, err := store.ParseTable(s)
		if err != nil {
			return
		}
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			t.Fatalf("accepted invalid text %q", s)
		}
		if tbl.String() != s {
			t.Fatalf("%q round-trips as %q", s, tbl.String())
		}
		st, err := store.New(s)
		if err != nil {
			t.Fatalf("ParseTable accepted %q but New refused it: %v", s, err)
		}
		q := st.QuotedTable()
		// Outside double quotes, only a dot may separate the parts.
		in := false
		for i := 0; i < len(q); i++ {
			switch {
			case q[i] == '"' && in && i+1 < len(q) && q[i+1] == '"':
				i++
			case q[i] == '"':
				in = !in
			case !in && q[i] != '.':
				t.Fatalf("%q quoted as %s: %q outside quotes", s, q, q[i])
			}
		}
		if in {
			t.Fatalf("%q quoted as %s: unterminated", s, q)
		}
	})
}
