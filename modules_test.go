package outbox_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// libraryPackages are the packages a program embedding the relay imports:
// the library, its store and the sinks that need nothing but the standard
// library. The broker sinks, metrics, tracing, the console and the CLI are
// the optional rest (docs/architecture.md, "Modules and Go versions").
var libraryPackages = []string{
	".", "./internal/store", "./internal/service", "./internal/spelling", "./inbox", "./webhook",
	"./sink/httpsink", "./sink/stdoutsink", "./sink/route", "./sink/sinkutil", "./sink/sinktest",
}

// libraryModules are the only modules those packages and their tests may
// load. One module serves the library, the CLI and every broker sink; this
// list is what keeps that cheap for a user: a program importing the library
// downloads and builds pgx and these, and go mod tidy fetches no broker
// client.
var libraryModules = map[string]bool{
	"github.com/outboxd/outbox":      true,
	"github.com/jackc/pgx/v5":        true,
	"github.com/jackc/pgpassfile":    true,
	"github.com/jackc/pgservicefile": true,
	"github.com/jackc/puddle/v2":     true,
	"golang.org/x/sync":              true,
	"golang.org/x/text":              true,
	"golang.org/x/time":              true, // the token buckets of Config.Flow
	"github.com/stretchr/testify":    true, // tests only
	"github.com/davecgh/go-spew":     true, // testify's
	"github.com/pmezard/go-difflib":  true, // testify's
	"go.uber.org/goleak":             true, // tests only
	"go.yaml.in/yaml/v3":             true, // testify's
	"pgregory.net/rapid":             true, // tests only
}

// TestLibraryDependencies fails when a library package, or one of its
// tests, starts importing a module outside libraryModules (a broker client,
// Prometheus, OpenTelemetry, the CLI's parser): that would put it into every
// user's downloads and go.sum.
func TestLibraryDependencies(t *testing.T) {
	t.Parallel()
	args := append([]string{"list", "-test", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}"}, libraryPackages...)
	// Stdout only: go prints "go: downloading ..." to stderr when the
	// module cache is cold, and those are not modules.
	cmd := exec.Command("go", args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	seen := map[string]bool{}
	for _, m := range strings.Fields(string(out)) {
		seen[m] = true
		require.True(t, libraryModules[m], "a library package or its test now loads module %s; keep it out of the library (move the code or test to the package that needs it)", m)
	}
	require.True(t, seen["github.com/jackc/pgx/v5"], "go list listed the library's modules")
}
