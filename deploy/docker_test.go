package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	dockerfilePath = "../Dockerfile"
	makefilePath   = "../Makefile"
	// imageUser is the distroless nonroot user the image runs as; the Helm
	// chart's runAsUser must be the same.
	imageUser = "65532"
)

// dockerfile is a parsed Dockerfile: each stage's base and instructions.
type dockerStage struct {
	from         string
	instructions [][2]string // keyword, arguments
}

func parseDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	var stages []dockerStage
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, dockerfilePath)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kw, args, _ := strings.Cut(line, " ")
		kw = strings.ToUpper(kw)
		if kw == "FROM" {
			stages = append(stages, dockerStage{from: args})
			continue
		}
		require.NotEmpty(t, stages, "%s before the first FROM", kw)
		s := &stages[len(stages)-1]
		s.instructions = append(s.instructions, [2]string{kw, args})
	}
	return stages
}

func (s dockerStage) get(kw string) []string {
	var out []string
	for _, in := range s.instructions {
		if in[0] == kw {
			out = append(out, in[1])
		}
	}
	return out
}

// makeRecipe is the recipe of a make target, variables expanded by make
// itself (make -n).
func makeRecipe(t *testing.T, target string, vars ...string) string {
	t.Helper()
	out, err := exec.Command("make", append([]string{"-s", "-n", "-C", "..", target}, vars...)...).CombinedOutput()
	require.NoError(t, err, "make -n %s: %s", target, out)
	return strings.TrimSpace(string(out))
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := parseDockerfile(t)
	require.Len(t, stages, 2, "a build stage and a runtime stage")
	build, runtime := stages[0], stages[1]

	t.Run("BuildStageUsesTheGoDirective", func(t *testing.T) {
		t.Parallel()
		// The directive is the oldest Go supported; the image builds with a
		// pinned patch release of that same line, never an older one.
		m := regexp.MustCompile(`^golang:(\d+)\.(\d+)\.(\d+) AS build$`).FindStringSubmatch(build.from)
		require.NotNil(t, m, "the build stage pins a Go release: %q", build.from)
		want := regexp.MustCompile(`^(\d+)\.(\d+)(?:\.(\d+))?$`).FindStringSubmatch(goDirective(t))
		require.NotNil(t, want, "go.mod's go directive")
		require.Equal(t, want[1]+"."+want[2], m[1]+"."+m[2], "the build stage's Go is the directive's release line")
		patch, _ := strconv.Atoi(m[3])
		least, _ := strconv.Atoi(want[3])
		require.GreaterOrEqual(t, patch, least, "the build stage's Go is not older than the directive")
	})

	t.Run("BuildStageRunsMakeBuild", func(t *testing.T) {
		t.Parallel()
		runs := build.get("RUN")
		require.Contains(t, runs, "make build VERSION=${VERSION}", "the image holds the binary make build makes")
		recipe := makeRecipe(t, "build", "VERSION=x")
		require.True(t, strings.HasPrefix(recipe, "CGO_ENABLED=0 "), "make build is the static build: %s", recipe)
		require.Contains(t, recipe, "-o bin/outboxd ./cmd/outboxd")
		require.Equal(t, []string{"--from=build /src/bin/outboxd /usr/local/bin/outboxd"}, runtime.get("COPY"))
	})

	t.Run("RuntimeStage", func(t *testing.T) {
		t.Parallel()
		require.Regexp(t, `^gcr\.io/distroless/static-debian\d+:nonroot$`, runtime.from, "no libc, CA certificates, a nonroot user")
		require.Equal(t, []string{imageUser + ":" + imageUser}, runtime.get("USER"), "numeric, so runAsNonRoot can verify it")
		var entry []string
		require.Len(t, runtime.get("ENTRYPOINT"), 1)
		require.NoError(t, json.Unmarshal([]byte(runtime.get("ENTRYPOINT")[0]), &entry), "exec form")
		require.Equal(t, []string{binaryPath}, entry)
		require.Equal(t, []string{`["run"]`}, runtime.get("CMD"))
	})

	t.Run("DocumentedRun", func(t *testing.T) {
		t.Parallel()
		// The README's docker commands run the image's entrypoint with an
		// outboxd command.
		readme := string(readFile(t, "../README.md"))
		cmds := regexp.MustCompile(`(?m)^docker run [^\n]*outboxd (\w+)`).FindAllStringSubmatch(readme, -1)
		require.NotEmpty(t, cmds, "README shows how to run the image")
		for _, m := range cmds {
			require.Contains(t, []string{"migrate", "run", "status", "config"}, m[1])
		}
	})
}

// TestMakeBuildIsStatic runs the build the Dockerfile runs and checks the
// binary: no ELF interpreter and no shared library needed (what ldd and
// file report as "statically linked"), CGO_ENABLED=0 in its build info.
func TestMakeBuildIsStatic(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "outboxd")
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "-s", "-C", "..", "build", "BIN="+bin, "VERSION=static-check")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "make build: %s", out)

	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "the binary asks for a dynamic loader")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs, "the binary links shared libraries")

	info, err := buildinfo.ReadFile(bin)
	require.NoError(t, err)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	require.Equal(t, "0", settings["CGO_ENABLED"])
	require.Equal(t, "true", settings["-trimpath"])

	version, err := exec.CommandContext(ctx, bin, "version").Output()
	require.NoError(t, err)
	require.Equal(t, "outboxd static-check\n", string(version))
	_ = os.Remove(bin)
}

// goDirective is go.mod's go version, the one the project builds with.
func goDirective(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(readFile(t, "../go.mod"))
	require.NotNil(t, m, "go.mod has a go directive")
	return string(m[1])
}
