// Package cli implements the outboxd command line. Every command prints one
// clear error line on stderr and exits non-zero on failure: 2 for bad usage
// or input, 1 for a failure while running (database unreachable, missing
// table, ...). Secrets in the DSN never reach the output.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	flag "github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	// ExitBlocked: run --drain delivered everything it could, and messages
	// are left waiting behind a dead message of their aggregate.
	ExitBlocked = 3
)

// env is what a command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// collect, when set, receives each command's flag set in place of a
	// parse (the command then stops with errCollected): how completion
	// learns a command's flags without running it.
	collect func(*flag.FlagSet)
}

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"migrate", "create the outbox table, its indexes and wake-up trigger (idempotent)", runMigrate},
		{"enqueue", "insert one message (prints its id)", runEnqueue},
		{"run", "relay messages to a sink until stopped (or drained)", runRun},
		{"status", "show counts by status, oldest pending age, expired leases, attempts", runStatus},
		{"show", "print one message with its attempt history (show ID [--json])", runShow},
		{"retry-now", "make messages waiting for a later attempt due now (retry-now ID...)", runRetryNow},
		{"pause", "pause a route (--route NAME) or the whole table on every dispatcher until resumed", runPause},
		{"resume", "resume a paused route (--route NAME) or table; its held messages go at once", runResume},
		{"dead", "list, retry or skip dead messages (dead list|retry|skip)", runDead},
		{"replay", "deliver done messages matching --filter again, marked Outbox-Replay (--dry-run, --rate)", runReplay},
		{"purge", "delete done messages older than a duration, in batches", runPurge},
		{"console", "serve the web console and its JSON API (--addr, default 127.0.0.1:8080)", runConsole},
		{"config", "check a config file and print the effective configuration (config check)", runConfig},
		{"demo", "run the whole pipeline on a throwaway database and show a summary", runDemo},
		{"bench", "measure drain throughput, round trips and delivery lag", runBench},
		{"version", "print the version", runVersion},
	}
}

// Version is set at build time with -ldflags "-X github.com/outboxd/outbox/internal/cli.Version=...".
var Version = "dev"

// usageError marks bad usage or input: exit code 2. err, when set, is the
// library's error the message renders (a *outbox.ConfigError named by flags).
type usageError struct {
	msg string
	err error
}

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Unwrap() error { return e.err }

// exitError is a failure with an exit code of its own.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// Main runs the command line and returns the process exit code.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	if len(args) == 0 {
		printUsage(stderr)
		return ExitUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		if len(args) > 1 && args[0] == "help" && findCommand(args[1]) != nil {
			// `outboxd help run` is `outboxd run --help`.
			args = []string{args[1], "--help"}
			break
		}
		printUsage(stdout)
		return ExitOK
	}
	root := newRoot(e)
	if name := args[0]; !strings.HasPrefix(name, "-") && !isCommand(root, name) {
		fmt.Fprintf(stderr, "outboxd: unknown command %q%s (run `outboxd help`)\n", name, didYouMean(root.SuggestionsFor(name), ""))
		return ExitUsage
	}
	root.SetArgs(args)
	return report(e, root.ExecuteContext(ctx))
}

func report(e *env, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	msg := strings.Join(strings.Fields(err.Error()), " ")
	fmt.Fprintf(e.stderr, "outboxd: %s\n", msg)
	var ue *usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	var xe *exitError
	if errors.As(err, &xe) {
		return xe.code
	}
	return ExitFailure
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "outboxd relays a PostgreSQL transactional outbox to a sink, at least once, under lease and fencing.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: outboxd COMMAND [ARGS] [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "completion", "print a shell completion script: completion bash|zsh|fish")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command takes --dsn (else $OUTBOX_DSN, else the libpq environment: PGHOST, PGUSER, ...)")
	fmt.Fprintln(w, "and --table (default outbox; may be schema-qualified). `outboxd COMMAND -h` lists a command's flags")
	fmt.Fprintln(w, "and the OUTBOXD_* variable that sets each one. Flags go anywhere after the command, in GNU form")
	fmt.Fprintln(w, "(--table x, --ordered=false); the single-dash -table x is read as --table x.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Sink URL schemes (--sink, --route): "+strings.Join(sinkSchemes(), ", ")+" (stdout: and null: take no address)")
}

// newFlagSet returns a flag set that reports errors as usage errors instead
// of printing and exiting. Flags may come before, between or after the
// positional arguments.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: outboxd %s\n\nFlags:\n", synopsis)
		printFlags(e.stdout, fs)
	}
	return fs
}

// envAnnotation is the flag annotation listing the environment variables
// that set a flag (config layering), shown in the flag list.
const envAnnotation = "outboxd_env"

// markLayered records on each flag of fs the environment variables that set
// it when the command line does not, as applyLayers reads them.
func markLayered(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		var vars []string
		switch f.Name {
		case connectFlag:
			return
		case "config":
			vars = []string{"OUTBOXD_CONFIG"}
		case "dsn":
			vars = []string{envName(f.Name), "OUTBOX_DSN"}
		default:
			vars = []string{envName(f.Name)}
		}
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = vars
	})
}

// printFlags writes the flag list, as Go's flag package laid it out, in GNU
// spelling: each flag, its value's kind, then its usage, default and
// environment variables.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if f.Hidden {
			return
		}
		varname, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if varname != "" {
			line += " " + varname
		}
		if !isZeroDefault(f) {
			if f.Value.Type() == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		for _, v := range f.Annotations[envAnnotation] {
			usage += " [$" + v + "]"
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}

// isZeroDefault reports whether a flag's default is its type's zero value,
// which the flag list does not show.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]":
		return true
	}
	t := reflect.TypeOf(f.Value)
	if q, ok := f.Value.(*quietValue); ok {
		t = reflect.TypeOf(q.Value)
	}
	if t.Kind() != reflect.Pointer {
		return false
	}
	z, ok := reflect.New(t.Elem()).Interface().(flag.Value)
	return ok && z.String() == f.DefValue
}

// parseFlags parses args, turning flag errors into usage errors and -h into
// the flag list.
func parseFlags(e *env, fs *flag.FlagSet, args []string) error {
	if e.collect != nil {
		e.collect(fs)
		return errCollected
	}
	err := fs.Parse(normalizeArgs(fs, args))
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		return flag.ErrHelp // pflag has printed the flag list (fs.Usage)
	}
	var quiet error
	fs.VisitAll(func(f *flag.Flag) {
		if q, ok := f.Value.(*quietValue); ok && q.err != nil && quiet == nil {
			quiet = usagef("%s: invalid value for --%s: %v", fs.Name(), f.Name, q.err)
		}
	})
	if quiet != nil {
		return quiet
	}
	var ne *flag.NotExistError
	if errors.As(err, &ne) && ne.GetSpecifiedShortnames() == "" {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		name := ne.GetSpecifiedName()
		return usagef("%s: unknown flag --%s%s", fs.Name(), name, didYouMean(suggest(name, names), "--"))
	}
	return usagef("%s: %v", fs.Name(), err)
}

// normalizeArgs rewrites the single-dash long form that Go's flag package
// read (-table x, -ordered=false) to the GNU form pflag reads (--table x).
// A value following a flag that takes one is left as it is, and so is
// everything after "--".
func normalizeArgs(fs *flag.FlagSet, args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		var name string
		switch {
		case strings.HasPrefix(a, "--"):
			name = a[2:]
		case len(a) > 2 && a[0] == '-' && isLetter(a[1]):
			name, a = a[1:], "-"+a
		default:
			out = append(out, a)
			continue
		}
		out = append(out, a)
		n, _, hasValue := strings.Cut(name, "=")
		if f := fs.Lookup(n); f != nil && !hasValue && f.NoOptDefVal == "" && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// quietValue wraps a flag.Value whose text may hold a secret (a sink URL
// with its password or token). The flag package reports a failed Set as
// `invalid value "RAW" for flag -NAME: ERR`, the raw value included;
// parseFlags reports a quietValue's failure by the flag's name and the
// error alone, so the wrapped Set must not quote its value either.
type quietValue struct {
	flag.Value
	err error
}

// String is the wrapped value's; the flag package also calls it on a zero
// quietValue, for defaults.
func (q *quietValue) String() string {
	if q == nil || q.Value == nil {
		return ""
	}
	return q.Value.String()
}

func (q *quietValue) Set(s string) error {
	q.err = q.Value.Set(s)
	return q.err
}

// quietVar defines a flag whose value is never echoed in errors.
func quietVar(fs *flag.FlagSet, v flag.Value, name, usage string) {
	fs.Var(&quietValue{Value: v}, name, usage)
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "version")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, "outboxd", versionString())
	return nil
}

// logFlags are the logging options of long-running commands.
type logFlags struct {
	format string
	level  string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", l.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		opts.ReplaceAttr = durationAsText
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usagef("--log-format: %q is not one of text, json", l.format)
	}
}

// durationAsText writes a time.Duration attribute as its Go text ("1.5s",
// "1m0s"), as the text handler does, instead of the JSON handler's integer
// nanoseconds, which read as a count and mislead in dashboards.
func durationAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// routeOTelLogs sends the OpenTelemetry SDK's own log (its internal logger
// writes text to stderr) and its error handler (the log package's default
// logger: failed span exports) to logger, so they join the log stream.
func routeOTelLogs(logger *slog.Logger) {
	otel.SetLogger(logr.FromSlogHandler(logger.Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing: OpenTelemetry error", slog.Any("error", err))
	}))
}

// shutdownContext is cancelled by the first SIGTERM or SIGINT, which starts a
// graceful shutdown. A second one exits at once: in-flight rows keep their
// leases and are delivered again once those expire.
func shutdownContext(parent context.Context, stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			fmt.Fprintln(stderr, "outboxd: second signal: exiting without waiting for in-flight publishes (their rows are re-delivered after the lease)")
			os.Exit(ExitFailure)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
