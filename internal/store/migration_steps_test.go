package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMigrationFilesParse: every embedded migration parses into steps with
// a check and an apply, and step names are unique, since logs and dry runs
// name steps by them.
func TestMigrationFilesParse(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, st := range migrationSteps() {
		key := st.Migration + ": " + st.Name
		require.False(t, seen[key], "duplicate step %s", key)
		seen[key] = true
		require.NotEmpty(t, st.check, key)
		require.NotEmpty(t, st.apply, key)
		if st.concurrent() {
			for _, stmt := range st.statements() {
				require.NotContains(t, stmt, "$$", "%s: a step run statement by statement has no dollar-quoted body", key)
			}
		}
	}
	require.True(t, seen["001_create: table"])
	require.True(t, seen["002_headers: headers column"])
}

func TestParseMigrationRefusesIncompleteStep(t *testing.T) {
	t.Parallel()
	_, err := parseMigration("009_x", "-- header\n-- step: thing\n-- check:\nSELECT true\n")
	require.ErrorContains(t, err, `migration 009_x, step "thing": needs both`)
	_, err = parseMigration("009_x", "-- only a header\n")
	require.ErrorContains(t, err, "no steps")
	steps, err := parseMigration("009_x", "-- step: a\n-- why\n-- check:\nSELECT $1 = 'x';\n-- apply:\nCREATE INDEX {{concurrently}} i ON t (c);\nDROP INDEX x;\n")
	require.NoError(t, err)
	require.Equal(t, "SELECT $1 = 'x'", steps[0].check)
	require.True(t, steps[0].concurrent())
	require.Equal(t, []string{"CREATE INDEX {{concurrently}} i ON t (c);", "DROP INDEX x;"}, steps[0].statements())
}
