package store

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// maxBaseName keeps every derived name (table + "_aggregate_head" and the
// like) within PostgreSQL's 63-byte identifier limit, so nothing is truncated
// silently into a name that collides with another table's.
const maxBaseName = 40

// Table is a parsed, validated outbox table name.
type Table struct {
	Schema string // empty: resolved through search_path
	Name   string
}

// ParseTable accepts "name" or "schema.name". Any characters are allowed in
// either part; both are always quoted when spliced into SQL.
func ParseTable(s string) (Table, error) {
	if s == "" {
		return Table{}, fmt.Errorf("table name is empty")
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return Table{}, fmt.Errorf("table name %q is not valid UTF-8 text", s)
	}
	var t Table
	schema, name, qualified := strings.Cut(s, ".")
	if qualified {
		t.Schema, t.Name = schema, name
		if t.Schema == "" || t.Name == "" || strings.Contains(t.Name, ".") {
			return Table{}, fmt.Errorf("table name %q must be NAME or SCHEMA.NAME", s)
		}
	} else {
		t.Name = s
	}
	if len(t.Name) > maxBaseName || len(t.Schema) > 63 {
		return Table{}, fmt.Errorf("table name %q is too long (at most %d bytes, schema 63)", s, maxBaseName)
	}
	return t, nil
}

// String returns the name as the user wrote it.
func (t Table) String() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// ident returns the quoted, possibly schema-qualified identifier for a name
// derived from the table's (suffix "" is the table itself).
func (t Table) ident(suffix string) string {
	if t.Schema == "" {
		return pgx.Identifier{t.Name + suffix}.Sanitize()
	}
	return pgx.Identifier{t.Schema, t.Name + suffix}.Sanitize()
}

// bare returns a quoted unqualified derived name (index and trigger names
// take no schema).
func (t Table) bare(suffix string) string { return pgx.Identifier{t.Name + suffix}.Sanitize() }

// replacer substitutes the table's names for the markers of the embedded
// SQL: quoted, schema-qualified when the table is.
func (t Table) replacer() *strings.Replacer {
	schema := ""
	if t.Schema != "" {
		schema = pgx.Identifier{t.Schema}.Sanitize()
	}
	return strings.NewReplacer(
		"{{table}}", t.ident(""),
		"{{schema}}", schema,
		"{{waiters}}", t.ident("_waiters"),
		"{{wake_function}}", t.ident("_wake"),
		"{{wake_trigger}}", t.bare("_wake"),
		"{{ready_index}}", t.bare("_ready"),
		"{{leased_index}}", t.bare("_leased"),
		"{{aggregate_index}}", t.bare("_aggregate_head"),
		"{{dead_index}}", t.bare("_dead"),
		"{{done_index}}", t.bare("_done"),
		"{{audit}}", t.ident("_audit"),
	)
}
