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
func ParseTable(s string) (Table, error) { return ParseName(s, maxBaseName) }

// ParseName is ParseTable for a table of another kind (the inbox's), whose
// own derived names leave its name maxName bytes at most.
func ParseName(s string, maxName int) (Table, error) {
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
	if len(t.Name) > maxName || len(t.Schema) > 63 {
		return Table{}, fmt.Errorf("table name %q is too long (at most %d bytes, schema 63)", s, maxName)
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

// The names the migrations derive from the table's, each spelled here
// only: suffixes of the table's name.
const (
	suffixWaiters       = "_waiters"
	suffixWake          = "_wake" // the wake function (schema-qualified) and its trigger
	suffixReady         = "_ready"
	suffixLeased        = "_leased"
	suffixAggregate     = "_aggregate_head"
	suffixDead          = "_dead"
	suffixDone          = "_done"
	suffixAudit         = "_audit"
	suffixNonEmpty      = "_nonempty" // the check constraint refusing empty names
	suffixAttempts      = "_attempts" // the attempt history (and its index, "_attempts_message")
	suffixAttemptsIndex = "_attempts_message"
	suffixDispatchers   = "_dispatchers" // the live dispatchers
	suffixPauses        = "_pauses"      // the destinations an operator paused
	// Shard leases (Store.EnableShards).
	suffixShards       = "_shards"
	suffixShardMembers = "_shard_members"
	suffixShard        = "_shard" // the shard function (schema-qualified) and its trigger
	suffixShardIndex   = "_shard_ready"
	suffixShardFill    = "_shard_fill" // the function (schema-qualified) and trigger that give an updated row from before shards its shard
	// Snapshot cursors (Store.EnableCursor).
	suffixCursorIndex     = "_cursor"
	suffixParked          = "_parked"
	suffixParkedShard     = "_parked_shard"
	suffixParkedAggregate = "_parked_aggregate"
)

// relationSuffixes are the relations the migrations create beside the
// table: its indexes and the waiters, audit, attempts and dispatchers
// tables.
var relationSuffixes = []string{suffixReady, suffixLeased, suffixAggregate, suffixDead, suffixDone, suffixWaiters, suffixAudit,
	suffixAttempts, suffixAttemptsIndex, suffixDispatchers, suffixPauses}

// Channel is the table's wake-up notification channel, "schema.name"; the
// table must be resolved (its Schema set, as Resolve returns it).
func (t Table) Channel() string { return t.Schema + "." + t.Name }

// Waiters is the waiters table, in the table's schema.
func (t Table) Waiters() Table { return Table{Schema: t.Schema, Name: t.Name + suffixWaiters} }

// Attempts is the attempt history's table, in the table's schema.
func (t Table) Attempts() Table { return Table{Schema: t.Schema, Name: t.Name + suffixAttempts} }

// Dispatchers is the live dispatchers' table, in the table's schema.
func (t Table) Dispatchers() Table { return Table{Schema: t.Schema, Name: t.Name + suffixDispatchers} }

// Pauses is the table of paused destinations, in the table's schema.
func (t Table) Pauses() Table { return Table{Schema: t.Schema, Name: t.Name + suffixPauses} }

// WakeTrigger is the wake-up trigger's name (unquoted; a trigger takes no
// schema).
func (t Table) WakeTrigger() string { return t.Name + suffixWake }

// ident returns the quoted, possibly schema-qualified identifier for a name
// derived from the table's (suffix "" is the table itself).
func (t Table) ident(suffix string) string {
	if t.Schema == "" {
		return pgx.Identifier{t.Name + suffix}.Sanitize()
	}
	return pgx.Identifier{t.Schema, t.Name + suffix}.Sanitize()
}

// Quoted is the table's quoted, possibly schema-qualified identifier.
func (t Table) Quoted() string { return t.ident("") }

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
		"{{waiters}}", t.ident(suffixWaiters),
		"{{wake_function}}", t.ident(suffixWake),
		"{{wake_trigger}}", t.bare(suffixWake),
		"{{ready_index}}", t.bare(suffixReady),
		"{{leased_index}}", t.bare(suffixLeased),
		"{{aggregate_index}}", t.bare(suffixAggregate),
		"{{dead_index}}", t.bare(suffixDead),
		"{{done_index}}", t.bare(suffixDone),
		"{{audit}}", t.ident(suffixAudit),
		"{{nonempty_check}}", t.bare(suffixNonEmpty),
		"{{attempts}}", t.ident(suffixAttempts),
		"{{attempts_index}}", t.bare(suffixAttemptsIndex),
		"{{dispatchers}}", t.ident(suffixDispatchers),
		"{{pauses}}", t.ident(suffixPauses),
		"{{shards}}", t.ident(suffixShards),
		"{{shard_members}}", t.ident(suffixShardMembers),
		"{{shard_function}}", t.ident(suffixShard),
		"{{shard_trigger}}", t.bare(suffixShard),
		"{{shard_index}}", t.bare(suffixShardIndex),
		"{{shard_fill_function}}", t.ident(suffixShardFill),
		"{{shard_fill_trigger}}", t.bare(suffixShardFill),
		"{{cursor_index}}", t.bare(suffixCursorIndex),
		"{{parked}}", t.ident(suffixParked),
		"{{parked_shard_index}}", t.bare(suffixParkedShard),
		"{{parked_aggregate_index}}", t.bare(suffixParkedAggregate),
	)
}
