package outbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox/internal/store"
)

// MatchTables returns the outbox tables a pattern names, as SCHEMA.NAME,
// in order: pattern is NAME or SCHEMA.NAME where * stands for any run of
// characters in either part (tenant_*.outbox: the table outbox of every
// schema whose name starts with tenant_); without a schema, the first
// schema of the search path. Only tables with an outbox's columns match,
// not the tables migrate creates beside them.
func MatchTables(ctx context.Context, pool *pgxpool.Pool, pattern string) ([]string, error) {
	schema, name, qualified := strings.Cut(pattern, ".")
	if !qualified {
		schema, name = "", pattern
	}
	if name == "" || qualified && schema == "" || strings.Contains(name, ".") {
		return nil, fmt.Errorf("table pattern %q: want NAME or SCHEMA.NAME, with * for any run of characters", pattern)
	}
	return store.MatchTables(ctx, pool, schema, name)
}
