package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"slices"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox"
)

// filterFlags is a repeatable --filter: one term each (outbox.ParseFilter).
type filterFlags []string

func (f *filterFlags) String() string     { return strings.Join(*f, " ") }
func (f *filterFlags) Set(s string) error { *f = append(*f, s); return nil }
func (f *filterFlags) Type() string       { return "TERM" }

func (f *filterFlags) register(fs *flag.FlagSet) {
	fs.Var(f, "filter", "a filter term NAME=VALUE, repeatable: status=dead, event_type=E, aggregate_type=T, aggregate_id=ID, "+
		"id=1,2, id_min=N, id_max=N, created_after=TIME, created_before=TIME, error=TEXT, payload=PATH, header=PATH (docs/api.md, Filters)")
}

// parse returns the filter, or a usage error naming the bad term.
func (f filterFlags) parse() (outbox.Filter, error) {
	flt, err := outbox.ParseFilter(f)
	if err != nil {
		return outbox.Filter{}, usagef("--filter: %v", err)
	}
	return flt, nil
}

// needAll refuses a bulk write whose filter matches every message of its
// status unless --all says so, and --all beside a filter; a dry run may
// count everything. A status the action does not act on is the library's
// to refuse.
func needAll(cmd, status string, f outbox.Filter, all, dryRun bool) error {
	switch {
	case slices.ContainsFunc(f.Status, func(s string) bool { return s != status }):
		return nil
	case all && !f.Empty():
		return usagef("%s: give --all or --filter terms, not both", cmd)
	case !all && f.Empty() && !dryRun:
		return usagef("%s: the filter matches every message; give --filter terms, or --all to act on all of them", cmd)
	}
	return nil
}

// bulkErr makes a filter the database refused (a bad JSON path) a usage
// error, like a term ParseFilter refused; nothing was written.
func bulkErr(err error) error {
	var fe *outbox.FilterError
	if errors.As(err, &fe) {
		return usagef("--filter: %v", fe)
	}
	return err
}

// actor names who runs a CLI write in the audit table: cli:<login>.
func actor(e *env) string {
	name := e.getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}

// quietAdmin drops the library's audit log lines: the command's own output
// line is the record on the terminal, the audit row the one in the table.
func quietAdmin(a *outbox.Admin) *outbox.Admin {
	a.SetLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	return a
}

// countLine is the one line a filtered bulk command prints.
func countLine(verb, past string, dryRun bool, n int64) string {
	if dryRun {
		return fmt.Sprintf("would %s %d messages", verb, n)
	}
	return fmt.Sprintf("%s %d messages", past, n)
}

// progress reports a long bulk action on stderr, at most once a second.
func progress(e *env, past string) func(int64) {
	var last time.Time
	return func(done int64) {
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(e.stderr, "%s %d...\n", past, done)
		}
	}
}

func runReplay(ctx context.Context, e *env, args []string) error {
	var (
		filters filterFlags
		o       outbox.ReplayOpts
	)
	c := newDBCommand(e, "replay", "replay --filter TERM [--filter TERM...] [--name NAME] [--dry-run] [--rate N]", &filters)
	c.StringVar(&o.Name, "name", "", "the replay's name, sent as header Outbox-Replay (default replay-<UTC time>)")
	setsField(c.FlagSet, "name", "Name")
	c.BoolVar(&o.DryRun, "dry-run", false, "count the done messages that would be replayed; change nothing")
	c.Float64Var(&o.Rate, "rate", 0, "at most this many messages per second (0: unlimited)")
	setsField(c.FlagSet, "rate", "Rate")
	all := c.Bool("all", false, "replay every done message (instead of a --filter)")
	c.BoolVar(&o.IncludeNewer, "include-newer", false, "also replay messages that finish while the replay runs (by default it acts only on those done when it starts)")
	if err := c.parse(e, args); err != nil {
		return err
	}
	f, err := filters.parse()
	if err != nil {
		return err
	}
	if err := needAll("replay", "done", f, *all, o.DryRun); err != nil {
		return err
	}
	if o.Name == "" {
		o.Name = "replay-" + time.Now().UTC().Format("20060102T150405Z")
	}
	if err := o.Validate(); err != nil {
		return replayOptsErr(c.FlagSet, err)
	}
	o.Actor, o.Progress = actor(e), progress(e, "replayed")
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		n, err := quietAdmin(a).Replay(ctx, f, o)
		if err != nil {
			return bulkErr(err)
		}
		fmt.Fprintln(e.stdout, countLine("replay", "replayed", o.DryRun, n))
		return nil
	})
}

// replayOptsErr is a *outbox.ReplayOptsError named by the flag that sets
// its field, from the same table as a Config error.
func replayOptsErr(fs *flag.FlagSet, err error) error {
	var oe *outbox.ReplayOptsError
	if errors.As(err, &oe) {
		return &usageError{msg: flagFor(fs, oe.Field) + " " + oe.Reason, err: oe}
	}
	return err
}

// runDeadMatching runs dead retry or skip over a filter (or, with ids or
// --all and --dry-run, over those): one count line.
func runDeadMatching(ctx context.Context, e *env, c *dbCommand, verb string, f outbox.Filter, dryRun bool) error {
	past := map[string]string{"retry": "retried", "skip": "skipped"}[verb]
	o := outbox.BulkOpts{DryRun: dryRun, Actor: actor(e), Progress: progress(e, past)}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		var n int64
		var err error
		if verb == "retry" {
			n, err = quietAdmin(a).DeadRetryMatching(ctx, f, o)
		} else {
			n, err = quietAdmin(a).DeadSkipMatching(ctx, f, o)
		}
		if err != nil {
			return bulkErr(err)
		}
		fmt.Fprintln(e.stdout, countLine(verb, past, dryRun, n))
		return nil
	})
}
