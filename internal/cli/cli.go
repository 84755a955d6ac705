// Package cli implements the outboxd command line. Every command prints one
// clear error line on stderr and exits non-zero on failure: 2 for bad usage
// or input, 1 for a failure while running (database unreachable, missing
// table, ...). Secrets in the DSN never reach the output.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// env is what a command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
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

// usageError marks bad usage or input: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

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
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printUsage(stdout)
		return ExitOK
	}
	name := args[0]
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		ctx, stop := shutdownContext(ctx, stderr)
		defer stop()
		err := c.run(ctx, e, args[1:])
		return report(e, err)
	}
	fmt.Fprintf(stderr, "outboxd: unknown command %q (run `outboxd help`)\n", name)
	return ExitUsage
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
	return ExitFailure
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "outboxd relays a PostgreSQL transactional outbox to a sink, at least once, under lease and fencing.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: outboxd COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every command takes --dsn (else $OUTBOX_DSN, else the libpq environment: PGHOST, PGUSER, ...)")
	fmt.Fprintln(w, "and --table (default outbox; may be schema-qualified). `outboxd COMMAND -h` lists a command's flags.")
}

// newFlagSet returns a flag set that reports errors as usage errors instead
// of printing and exiting.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: outboxd %s\n\nFlags:\n", synopsis)
		fs.SetOutput(e.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args, turning flag errors into usage errors and -h into
// the flag list.
func parseFlags(fs *flag.FlagSet, args []string) error {
	// The flag package calls Usage itself on -h and on every parse error;
	// silenced here, the flag list is printed once, on -h only, so an error
	// leaves stdout clean for whatever reads it.
	usage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = usage
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return flag.ErrHelp
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
		return usagef("%s: %v", fs.Name(), err)
	}
	return nil
}

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

func runVersion(_ context.Context, e *env, _ []string) error {
	fmt.Fprintln(e.stdout, "outboxd", Version)
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
