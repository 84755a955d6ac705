package store

import (
	"context"
	"strings"
)

// MatchTables returns the outbox tables whose schema and name match the
// patterns given, where * stands for any run of characters (schema ""
// means the first schema of the search path), as SCHEMA.NAME, in
// order (sql/match_tables.sql).
func MatchTables(ctx context.Context, db DB, schema, name string) ([]string, error) {
	var schemaLike *string
	if schema != "" {
		p := likePattern(schema)
		schemaLike = &p
	}
	rows, err := db.Query(ctx, rawSQL("sql/match_tables.sql"), schemaLike, likePattern(name))
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, translate(err)
		}
		out = append(out, t)
	}
	return out, translate(rows.Err())
}

// likePattern turns a pattern with * into a LIKE pattern: the other
// characters stand for themselves.
func likePattern(p string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)
	return r.Replace(p)
}
