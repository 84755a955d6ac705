package store

import (
	"fmt"
	"strings"
	"sync"
)

// A migration step is one object a migration puts in place: a catalog check
// that says whether it already is, and the DDL that puts it there. The
// format of the files is described in migration/README.md.
type migrationStep struct {
	Migration string // the file, without .sql: "001_create"
	Name      string // "ready index"
	check     string // one SELECT of a boolean; $1 schema, $2 table name
	apply     string // the DDL, with the markers still in
}

// concurrent reports whether the step builds an index, which on a live
// table runs CONCURRENTLY and outside a transaction.
func (m migrationStep) concurrent() bool { return strings.Contains(m.apply, "{{concurrently}}") }

// checkArgs are the parameters the check uses: $1 the schema, $2 the
// table's name (the extended protocol refuses unused ones).
func (m migrationStep) checkArgs(t Table) []any {
	switch {
	case strings.Contains(m.check, "$2"):
		return []any{t.Schema, t.Name}
	case strings.Contains(m.check, "$1"):
		return []any{t.Schema}
	}
	return nil
}

// statements splits the apply at each line that ends in ";", for a step
// run outside a transaction, where each statement is sent by itself.
func (m migrationStep) statements() []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.SplitAfter(m.apply, "\n") {
		cur.WriteString(line)
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(stripComments(cur.String())); rest != "" {
		out = append(out, rest)
	}
	return out
}

// migrationSteps are every migration's steps in order (001_, 002_, ...).
var migrationSteps = sync.OnceValue(func() []migrationStep {
	entries, err := files.ReadDir("migration")
	if err != nil {
		panic(err)
	}
	var out []migrationStep
	for _, e := range entries { // ReadDir sorts by name
		name, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok {
			continue
		}
		steps, err := parseMigration(name, rawSQL("migration/"+e.Name()))
		if err != nil {
			panic(err) // embedded at build time: a malformed file is a build bug
		}
		out = append(out, steps...)
	}
	return out
})

// parseMigration reads one migration file: lines before the first
// "-- step:" are its header, then each step is "-- step: NAME", optional
// comment lines, "-- check:" and its query, "-- apply:" and its DDL.
func parseMigration(file, text string) ([]migrationStep, error) {
	var steps []migrationStep
	var section *strings.Builder
	var check, apply strings.Builder
	flush := func() error {
		if len(steps) == 0 {
			return nil
		}
		st := &steps[len(steps)-1]
		st.check = strings.TrimSuffix(strings.TrimSpace(check.String()), ";")
		st.apply = strings.TrimSpace(apply.String())
		check.Reset()
		apply.Reset()
		if strings.TrimSpace(stripComments(st.check)) == "" || strings.TrimSpace(stripComments(st.apply)) == "" {
			return fmt.Errorf("migration %s, step %q: needs both a -- check: and an -- apply: section", file, st.Name)
		}
		return nil
	}
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "-- step:"):
			if err := flush(); err != nil {
				return nil, err
			}
			steps = append(steps, migrationStep{Migration: file, Name: strings.TrimSpace(strings.TrimPrefix(trimmed, "-- step:"))})
			section = nil
		case trimmed == "-- check:" && len(steps) > 0:
			section = &check
		case trimmed == "-- apply:" && len(steps) > 0:
			section = &apply
		case section != nil:
			section.WriteString(line)
			section.WriteString("\n")
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("migration %s has no steps", file)
	}
	return steps, nil
}
