package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/jsonout"
	"github.com/outboxd/outbox/sink/sinkutil"
)

func runMigrate(ctx context.Context, e *env, args []string) error {
	var (
		lf          logFlags
		dryRun      bool
		lockTimeout time.Duration
		shards      int
		cursor      bool
		pattern     string
	)
	c := newDBCommand(e, "migrate", "migrate [--dsn DSN] [--table NAME | --pattern 'tenant_*.outbox'] [--dry-run] [--lock-timeout 2s] [--shards N [--cursor]]", &lf)
	c.StringVar(&pattern, "pattern", "", "migrate every existing outbox table this pattern matches (* for any run of characters, e.g. tenant_*.outbox), instead of --table")
	c.BoolVar(&dryRun, "dry-run", false, "print the SQL migrate would run (nothing for a current table) and change nothing")
	durVar(c.FlagSet, &lockTimeout, "lock-timeout", outbox.MigrateLockTimeoutDefault,
		"longest wait of a DDL statement for its table lock before it is rolled back and retried")
	c.IntVar(&shards, "shards", 0, "also set the table up for --lease-mode shard with N shards (1-4096; cannot be changed later); 0 = not")
	c.BoolVar(&cursor, "cursor", false, "with --shards: also set the table up for --lease-mode cursor (snapshot cursors; PostgreSQL 13 or later); from then on only cursor dispatchers may relay it")
	if err := c.parse(e, args); err != nil {
		return err
	}
	if cursor && shards == 0 {
		return usagef("--cursor needs --shards N")
	}
	if lockTimeout <= 0 {
		return usagef("--lock-timeout must be positive, got %s", lockTimeout)
	}
	if shards < 0 || shards > 4096 || shards > 0 && dryRun {
		return usagef("--shards must be 1 to 4096 (and without --dry-run), got %d", shards)
	}
	logger, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	migrate := func(a *outbox.Admin, table string) error {
		res, err := a.MigrateWith(ctx, &outbox.MigrateOptions{DryRun: dryRun, LockTimeout: lockTimeout, Logger: logger})
		switch {
		case err != nil:
			return err
		case dryRun:
			fmt.Fprint(e.stdout, res.SQL)
		case shards > 0:
			if err := a.EnableShards(ctx, shards); err != nil {
				return err
			}
			if cursor {
				if err := a.EnableCursors(ctx); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "migrated table %s with %d shards and snapshot cursors\n", table, shards)
				return nil
			}
			fmt.Fprintf(e.stdout, "migrated table %s with %d shards\n", table, shards)
		default:
			fmt.Fprintf(e.stdout, "migrated table %s\n", table)
		}
		return nil
	}
	if pattern != "" {
		if c.Changed("table") {
			return usagef("--pattern and --table: give one")
		}
		return migratePattern(ctx, e, &c.db, pattern, dryRun, migrate)
	}
	if len(c.db.pipelines) > 0 && !c.db.tableGiven {
		return migratePipelines(ctx, e, &c.db, dryRun, migrate)
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error { return migrate(a, c.db.table) })
}

// migratePattern migrates every existing outbox table pattern matches, in
// order, each as migrate --table would; it goes on past a table that
// fails and fails naming them. A pattern that matches nothing fails: a
// typo must not pass for "nothing to do".
func migratePattern(ctx context.Context, e *env, db *dbFlags, pattern string, dryRun bool, migrate func(*outbox.Admin, string) error) error {
	pool, err := db.connect(ctx, e, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	tables, err := outbox.MatchTables(ctx, pool, pattern)
	if err != nil {
		return usagef("--pattern: %v", err)
	}
	if len(tables) == 0 {
		return fmt.Errorf("--pattern %s matches no outbox table (create one with migrate --table SCHEMA.NAME)", pattern)
	}
	failed := migrateEach(e, pool, tables, dryRun, migrate)
	if len(failed) > 0 {
		return fmt.Errorf("migrate --pattern: %d of %d tables failed: %s", len(failed), len(tables), strings.Join(failed, ", "))
	}
	return nil
}

// migratePipelines is migrate with a config file's pipelines and no
// --table: each pipeline's table, and every table a pattern matches now
// (none is no error: tenants come later), each in its pipeline's
// database. It goes on past what fails and fails naming it.
func migratePipelines(ctx context.Context, e *env, db *dbFlags, dryRun bool, migrate func(*outbox.Admin, string) error) error {
	var failed []string
	err := eachPipeline(ctx, e, db, "", func(p *pipelineSpec, pool *pgxpool.Pool, tables []string) {
		fmt.Fprintf(e.stdout, "pipeline %s:\n", p.name)
		if len(tables) == 0 {
			fmt.Fprintf(e.stdout, "%s matches no outbox table yet\n", p.table)
		}
		failed = append(failed, migrateEach(e, pool, tables, dryRun, migrate)...)
	})
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("migrate --config: %d failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// hasPipeline refuses a --pipeline that names none of the file's ("":
// every one).
func (d *dbFlags) hasPipeline(name string) error {
	if name != "" && !slices.ContainsFunc(d.pipelines, func(p pipelineSpec) bool { return p.name == name }) {
		return usagef("--pipeline %q: --config %s has no such pipeline", name, d.config)
	}
	return nil
}

// eachPipeline calls f with each pipeline of db's config file (only the
// one named only, if not empty), a pool on its database and its tables: the
// one it names, or those its pattern matches now. A pipeline whose
// database or match fails is reported on stderr and returned as an error
// naming every one that did, after the others ran.
func eachPipeline(ctx context.Context, e *env, db *dbFlags, only string, f func(p *pipelineSpec, pool *pgxpool.Pool, tables []string)) error {
	if err := db.hasPipeline(only); err != nil {
		return err
	}
	var failed []string
	for i := range db.pipelines {
		p := &db.pipelines[i]
		if only != "" && p.name != only {
			continue
		}
		pd := *db
		pd.pipelines = nil
		if dsn, ok := p.values["dsn"]; ok {
			pd.dsn = dsn
		}
		pool, err := pd.connect(ctx, e, 4)
		if err != nil {
			fmt.Fprintf(e.stderr, "outboxd: pipeline %s: %v\n", p.name, err)
			failed = append(failed, p.name)
			continue
		}
		tables := []string{p.table}
		if isPattern(p.table) {
			tables, err = outbox.MatchTables(ctx, pool, p.table)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "outboxd: pipeline %s: %v\n", p.name, err)
			failed = append(failed, p.name)
		} else {
			f(p, pool, tables)
		}
		pool.Close()
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d %s failed: %s", len(failed), plural(int64(len(failed)), "pipeline", "pipelines"), strings.Join(failed, ", "))
	}
	return nil
}

// migrateEach migrates tables in order, going on past those that fail,
// and returns them.
func migrateEach(e *env, pool *pgxpool.Pool, tables []string, dryRun bool, migrate func(*outbox.Admin, string) error) []string {
	var failed []string
	for _, t := range tables {
		a, err := outbox.NewAdmin(pool, t)
		if err == nil {
			if dryRun {
				fmt.Fprintf(e.stdout, "-- %s\n", t)
			}
			err = migrate(a, t)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "outboxd: migrate %s: %s\n", t, strings.Join(strings.Fields(err.Error()), " "))
			failed = append(failed, t)
		}
	}
	return failed
}

func runEnqueue(ctx context.Context, e *env, args []string) error {
	var m outbox.NewMessage
	var payload string
	c := newDBCommand(e, "enqueue", "enqueue --aggregate-type T --aggregate-id ID --event-type E --payload JSON|-|@FILE")
	c.StringVar(&m.AggregateType, "aggregate-type", "", "aggregate type (required)")
	c.StringVar(&m.AggregateID, "aggregate-id", "", "aggregate id (required)")
	c.StringVar(&m.EventType, "event-type", "", "event type (required)")
	c.StringVar(&payload, "payload", "", "JSON payload, - for stdin, @FILE for a file (required)")
	if err := c.parse(e, args); err != nil {
		return err
	}
	for name, v := range map[string]string{"--aggregate-type": m.AggregateType, "--aggregate-id": m.AggregateID, "--event-type": m.EventType, "--payload": payload} {
		if v == "" {
			return usagef("enqueue: %s is required", name)
		}
	}
	body, err := readPayload(e, payload)
	if err != nil {
		return err
	}
	m.Payload = body
	_, pool, err := c.db.admin(ctx, e)
	if err != nil {
		return err
	}
	defer pool.Close()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	ids, err := outbox.Producer{Table: c.db.table}.Enqueue(ctx, tx, m)
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout, ids[0])
	return nil
}

// readPayload reads --payload: the JSON itself, - for stdin or @FILE.
func readPayload(e *env, payload string) (json.RawMessage, error) {
	body := []byte(payload)
	switch {
	case payload == "-":
		b, err := io.ReadAll(io.LimitReader(e.stdin, 64<<20))
		if err != nil {
			return nil, fmt.Errorf("reading payload from stdin: %w", err)
		}
		body = b
	case strings.HasPrefix(payload, "@"):
		b, err := readFile(payload[1:])
		if err != nil {
			return nil, usagef("--payload: %v", err)
		}
		body = b
	}
	if !json.Valid(body) {
		return nil, usagef("--payload is not valid JSON")
	}
	return body, nil
}

func runStatus(ctx context.Context, e *env, args []string) error {
	var asJSON, watch bool
	var interval time.Duration
	var pipeline string
	c := newDBCommand(e, "status", "status [--json] [--watch [--interval DUR]] [--config FILE [--pipeline NAME]]")
	c.BoolVar(&asJSON, "json", false, "print JSON (stable shape)")
	c.StringVar(&pipeline, "pipeline", "", "with a --config file of pipelines: the status of this pipeline's tables only (default every pipeline's)")
	c.BoolVar(&watch, "watch", false, "refresh a compact view until interrupted")
	durVar(c.FlagSet, &interval, "interval", 2*time.Second, "refresh interval with --watch")
	if err := c.parse(e, args); err != nil {
		return err
	}
	if watch && asJSON {
		return usagef("status: --watch and --json do not mix")
	}
	if interval <= 0 {
		return usagef("--interval must be positive")
	}
	if len(c.db.pipelines) > 0 && !c.db.tableGiven {
		if watch {
			return usagef("status --watch shows one table: give --table")
		}
		return statusPipelines(ctx, e, &c.db, pipeline, asJSON)
	}
	if pipeline != "" {
		return usagef("--pipeline needs a --config file with pipelines (and no --table)")
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		if watch {
			return watchStatus(ctx, e, a, c.db.table, interval)
		}
		st, err := a.Status(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(e.stdout, st)
		}
		return printStatus(e.stdout, c.db.table, st)
	})
}

// pipelineStatus is one table's status in status --json of pipelines.
type pipelineStatus struct {
	Pipeline string         `json:"pipeline"`
	Table    string         `json:"table"`
	Status   *outbox.Status `json:"status,omitempty"`
	Error    string         `json:"error,omitempty"`
}

// statusPipelines is status with a config file's pipelines and no
// --table: a block per table of each pipeline (or of the one named), a
// pattern's tables those it matches now. A table whose status cannot be
// read is reported and the others printed; the command then fails.
func statusPipelines(ctx context.Context, e *env, db *dbFlags, only string, asJSON bool) error {
	if err := db.hasPipeline(only); err != nil {
		return err
	}
	out := []pipelineStatus{}
	var failed []string
	err := eachPipeline(ctx, e, db, only, func(p *pipelineSpec, pool *pgxpool.Pool, tables []string) {
		if len(tables) == 0 && !asJSON {
			fmt.Fprintf(e.stdout, "pipeline %s: %s matches no outbox table yet\n\n", p.name, p.table)
		}
		for _, t := range tables {
			ps := pipelineStatus{Pipeline: p.name, Table: t}
			a, err := outbox.NewAdmin(pool, t)
			if err == nil {
				ps.Status, err = a.Status(ctx)
			}
			if err != nil {
				ps.Error = strings.Join(strings.Fields(err.Error()), " ")
				fmt.Fprintf(e.stderr, "outboxd: pipeline %s: table %s: %s\n", p.name, t, ps.Error)
				failed = append(failed, p.name+" ("+t+")")
			}
			out = append(out, ps)
			if !asJSON && ps.Status != nil {
				fmt.Fprintf(e.stdout, "pipeline %s\n", p.name)
				_ = printStatus(e.stdout, t, ps.Status)
				fmt.Fprintln(e.stdout)
			}
		}
	})
	if asJSON {
		if werr := writeJSON(e.stdout, struct {
			Pipelines []pipelineStatus `json:"pipelines"`
		}{out}); werr != nil {
			return werr
		}
	}
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("status: failed for %s", strings.Join(failed, ", "))
	}
	return nil
}

// printStatus writes the status table.
func printStatus(out io.Writer, table string, st *outbox.Status) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "table\t%s\n", table)
	for _, s := range []string{"pending", "processing", "done", "dead"} {
		fmt.Fprintf(w, "%s\t%d\n", s, st.Counts[s])
	}
	age := "none undelivered"
	if st.OldestPendingAgeSeconds != nil {
		age = (time.Duration(*st.OldestPendingAgeSeconds * float64(time.Second))).Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "oldest pending age\t%s\n", age)
	fmt.Fprintf(w, "expired leases\t%d\n", st.ExpiredLeases)
	for i, p := range st.Pauses {
		label := ""
		if i == 0 {
			label = "paused"
		}
		what := "the whole table"
		if !p.Whole() {
			what = fmt.Sprintf("route %q", p.Route)
		}
		fmt.Fprintf(w, "%s\t%s %s\n", label, what, pauseLine(p))
	}
	for i, d := range st.Destinations {
		label := ""
		if i == 0 {
			label = "destinations"
		}
		fmt.Fprintf(w, "%s\t%s\n", label, destinationLine(d))
	}
	if len(st.Dispatchers) == 0 {
		fmt.Fprintf(w, "dispatchers\tnone running (none reported within three beats)\n")
	}
	for i, d := range st.Dispatchers {
		label := ""
		if i == 0 {
			label = fmt.Sprintf("dispatchers (%d)", len(st.Dispatchers))
		}
		sink := ""
		if d.SinkPaused {
			sink = ", sink paused (unavailable: probing)"
		}
		fmt.Fprintf(w, "%s\t%s on %s, %s, %s leases, %d in flight, %d delivered in the last minute%s, seen %s\n", label,
			d.Owner, d.Host, d.Version, d.LeaseMode, d.InFlight, d.Delivered1m, sink, isoTime(d.LastSeen))
	}
	if b := st.Blocked; b.Messages > 0 {
		fmt.Fprintf(w, "behind a dead head\t%d %s of %d %s (delivered in order, they wait for dead retry or skip)\n",
			b.Messages, plural(b.Messages, "message", "messages"), b.Aggregates, plural(b.Aggregates, "aggregate", "aggregates"))
		for _, g := range b.List {
			fmt.Fprintf(w, "\taggregate %s: %d waiting behind dead message %d\n", g.AggregateID, g.Waiting, g.DeadID)
		}
		if more := b.Aggregates - int64(len(b.List)); more > 0 {
			fmt.Fprintf(w, "\tand %d more %s\n", more, plural(more, "aggregate", "aggregates"))
		}
	}
	if len(st.Attempts) > 0 {
		keys := make([]int, 0, len(st.Attempts))
		for k := range st.Attempts {
			n, _ := strconv.Atoi(k)
			keys = append(keys, n)
		}
		sort.Ints(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%d: %d", k, st.Attempts[strconv.Itoa(k)])
		}
		fmt.Fprintf(w, "attempts (undelivered)\t%s\n", strings.Join(parts, ", "))
	}
	return w.Flush()
}

// watchStatus redraws a compact status view every interval until ctx ends.
// On a terminal it redraws in place; otherwise it prints one frame after
// another.
func watchStatus(ctx context.Context, e *env, a *outbox.Admin, table string, interval time.Duration) error {
	tty := false
	if f, ok := e.stdout.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	var lastDone int64 = -1
	var lastAt time.Time
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st, err := a.Status(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		if tty {
			fmt.Fprint(e.stdout, "\033[H\033[2J")
		}
		fmt.Fprintf(e.stdout, "outboxd status  %s  %s  (every %s; Ctrl-C stops)\n", table, now.Format("15:04:05"), interval)
		age := "-"
		if st.OldestPendingAgeSeconds != nil {
			age = time.Duration(*st.OldestPendingAgeSeconds * float64(time.Second)).Round(time.Millisecond).String()
		}
		fmt.Fprintf(e.stdout, "pending %d  processing %d  done %d  dead %d\n",
			st.Counts["pending"], st.Counts["processing"], st.Counts["done"], st.Counts["dead"])
		rate := "-"
		if lastDone >= 0 {
			rate = fmt.Sprintf("%.1f/s", float64(st.Counts["done"]-lastDone)/now.Sub(lastAt).Seconds())
		}
		fmt.Fprintf(e.stdout, "oldest undelivered %s  expired leases %d  done rate %s\n", age, st.ExpiredLeases, rate)
		if !tty {
			fmt.Fprintln(e.stdout)
		}
		lastDone, lastAt = st.Counts["done"], now
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func runDead(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintln(e.stdout, "Usage: outboxd dead list [--json] [--limit N] [--after ID] | dead show ID [--json] | "+
				"dead top [--json] [--limit N] [--scan N] | dead retry|skip --all|ID...|--filter TERM... [--dry-run]")
			return nil
		}
		return usagef("dead: want a subcommand: list, show, top, retry or skip")
	}
	switch args[0] {
	case "list":
		return runDeadList(ctx, e, args[1:])
	case "top":
		return runDeadTop(ctx, e, args[1:])
	case "show":
		return runDeadShow(ctx, e, args[1:])
	case "retry":
		return runDeadMove(ctx, e, "retry", args[1:])
	case "skip":
		return runDeadMove(ctx, e, "skip", args[1:])
	default:
		return usagef("dead: unknown subcommand %q (want list, show, top, retry or skip)", args[0])
	}
}

func runDeadList(ctx context.Context, e *env, args []string) error {
	var (
		asJSON bool
		limit  int
		after  int64
	)
	c := newDBCommand(e, "dead list", "dead list [--json] [--limit N] [--after ID]")
	c.BoolVar(&asJSON, "json", false, "print a JSON array (stable shape)")
	c.IntVar(&limit, "limit", 100, "at most this many messages")
	c.Int64Var(&after, "after", 0, "only ids greater than this (for paging)")
	if err := c.parse(e, args); err != nil {
		return err
	}
	if limit < 1 {
		return usagef("--limit must be positive")
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		dead, err := a.DeadList(ctx, after, limit)
		switch {
		case err != nil:
			return err
		case asJSON && dead == nil:
			return writeJSON(e.stdout, []outbox.DeadMessage{})
		case asJSON:
			return writeJSON(e.stdout, dead)
		case len(dead) == 0:
			fmt.Fprintln(e.stdout, "no dead messages")
			return nil
		}
		w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tAGGREGATE\tEVENT\tATTEMPTS\tCREATED\tLAST ERROR")
		for _, d := range dead {
			fmt.Fprintf(w, "%d\t%s/%s\t%s\t%d\t%s\t%s\n", d.ID, d.AggregateType, d.AggregateID, d.EventType,
				d.Attempts, d.CreatedAt.UTC().Format(time.RFC3339), oneLine(d.LastError, 80))
		}
		return w.Flush()
	})
}

func runDeadTop(ctx context.Context, e *env, args []string) error {
	var (
		asJSON      bool
		limit, scan int
	)
	c := newDBCommand(e, "dead top", "dead top [--json] [--limit N] [--scan N]")
	c.BoolVar(&asJSON, "json", false, "print JSON (stable shape)")
	c.IntVar(&limit, "limit", 20, "at most this many groups, the largest first")
	c.IntVar(&scan, "scan", outbox.DeadTopScanDefault, "read at most this many dead messages, the newest first")
	if err := c.parse(e, args); err != nil {
		return err
	}
	if limit < 1 {
		return usagef("--limit must be positive")
	}
	if scan < 1 {
		return usagef("--scan must be positive")
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		top, err := a.DeadTop(ctx, limit, scan)
		switch {
		case err != nil:
			return err
		case asJSON:
			return writeJSON(e.stdout, top)
		case len(top.Groups) == 0:
			fmt.Fprintln(e.stdout, "no dead messages")
			return nil
		}
		w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "COUNT\tEVENT\tERROR SHAPE\tNEWEST")
		for _, g := range top.Groups {
			fmt.Fprintf(w, "%d\t%s\t%s\t%d\n", g.Count, g.EventType, oneLine(g.Shape, 80), g.NewestID)
		}
		if err := w.Flush(); err != nil {
			return err
		}
		more := ""
		if top.More {
			more = fmt.Sprintf(" (the newest %d dead messages were read; --scan reads more)", top.Scanned)
		}
		fmt.Fprintf(e.stdout, "\n%d groups%s. Retry or skip a group (preview with --dry-run):\n", len(top.Groups), more)
		for i, g := range top.Groups {
			if i == 3 {
				break
			}
			fmt.Fprintf(e.stdout, "  outboxd dead retry %s\n", filterArgs(g.Filter))
		}
		return nil
	})
}

// filterArgs is a filter as --filter flags, each quoted for a POSIX shell.
func filterArgs(terms []string) string {
	parts := make([]string, len(terms))
	for i, t := range terms {
		parts[i] = "--filter " + shellQuote(t)
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain
// characters.
func shellQuote(s string) string {
	plain := func(r rune) bool {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-=.,:/@", r)
	}
	if s != "" && strings.IndexFunc(s, func(r rune) bool { return !plain(r) }) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func runDeadShow(ctx context.Context, e *env, args []string) error {
	var asJSON bool
	c := newDBCommand(e, "dead show", "dead show ID [--json]")
	c.BoolVar(&asJSON, "json", false, "print JSON (the dead list --json element)")
	// The id may come before or after the flags.
	var pos []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		pos, args = append(pos, args[0]), args[1:]
	}
	if err := c.parseWithArgs(e, args); err != nil {
		return err
	}
	pos = append(pos, c.Args()...)
	if len(pos) != 1 {
		return usagef("dead show: want exactly one message id")
	}
	ids, err := parseIDs(pos)
	if err != nil {
		return err
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		found, err := a.DeadList(ctx, ids[0]-1, 1)
		switch {
		case err != nil:
			return err
		case len(found) == 0 || found[0].ID != ids[0]:
			return fmt.Errorf("message %d is not dead (or does not exist)", ids[0])
		case asJSON:
			return writeJSON(e.stdout, found[0])
		}
		return printDead(e.stdout, found[0])
	})
}

// indentPayload is a payload as printed under its heading: indented JSON,
// or as stored when it does not parse.
func indentPayload(raw []byte) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "  ", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// printDead writes one dead message, its payload indented, and how to
// retry or skip it.
func printDead(out io.Writer, d outbox.DeadMessage) error {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%d\n", d.ID)
	fmt.Fprintf(w, "aggregate\t%s / %s\n", d.AggregateType, d.AggregateID)
	fmt.Fprintf(w, "event type\t%s\n", d.EventType)
	fmt.Fprintf(w, "created at\t%s\n", d.CreatedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "attempts\t%d\n", d.Attempts)
	fmt.Fprintf(w, "lease version\t%d\n", d.LeaseVersion)
	fmt.Fprintf(w, "last error\t%s\n", d.LastError)
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "payload\n  %s\n", indentPayload(d.Payload))
	fmt.Fprintf(out, "\nretry with `outboxd dead retry %d`, or skip it with `outboxd dead skip %d`\n", d.ID, d.ID)
	return nil
}

func runDeadMove(ctx context.Context, e *env, verb string, args []string) error {
	var (
		all     bool
		dryRun  bool
		filters filterFlags
	)
	synopsis := "dead " + verb + " --all|ID...|--filter TERM... [--dry-run]"
	c := newDBCommand(e, "dead "+verb, synopsis, &filters)
	c.BoolVar(&dryRun, "dry-run", false, "count the dead messages that would move; change nothing")
	c.BoolVar(&all, "all", false, verb+" every dead message")
	if err := c.parseWithArgs(e, args); err != nil {
		return err
	}
	ids, err := parseIDs(c.Args())
	if err != nil {
		return err
	}
	f, err := filters.parse()
	if err != nil {
		return err
	}
	switch {
	case len(ids) > 0 && (all || len(filters) > 0):
		return usagef("dead %s: give one of --all, ids or --filter", verb)
	case len(ids) > 0 && !dryRun:
		return c.withAdmin(ctx, e, func(a *outbox.Admin) error { return moveDead(ctx, e, quietAdmin(a), verb, false, ids) })
	case len(ids) > 0:
		f.IDs = ids
		return runDeadMatching(ctx, e, c, verb, f, true)
	case !all && len(filters) == 0 && !dryRun:
		return usagef("dead %s: no ids given (or --filter, or --all)", verb)
	}
	if err := needAll("dead "+verb, "dead", f, all, dryRun); err != nil {
		return err
	}
	if all && verb == "retry" && !dryRun {
		return c.withAdmin(ctx, e, func(a *outbox.Admin) error { return moveDead(ctx, e, quietAdmin(a), verb, true, nil) })
	}
	return runDeadMatching(ctx, e, c, verb, f, dryRun)
}

// moveDead retries or skips the dead messages ids (every one with all) and
// prints what moved.
func moveDead(ctx context.Context, e *env, a *outbox.Admin, verb string, all bool, ids []int64) error {
	var moved []int64
	var err error
	switch {
	case all:
		moved, err = a.DeadRetryAll(ctx)
	case verb == "retry":
		moved, err = a.DeadRetry(ctx, ids...)
	default:
		moved, err = a.DeadSkip(ctx, ids...)
	}
	if err != nil {
		return err
	}
	past := map[string]string{"retry": "retried", "skip": "skipped"}[verb]
	fmt.Fprintf(e.stdout, "%s %d message(s)%s\n", past, len(moved), idList(moved))
	if missing := missingIDs(ids, moved); len(missing) > 0 {
		return fmt.Errorf("not dead (or not found): %s", joinIDs(missing))
	}
	return nil
}

func runPurge(ctx context.Context, e *env, args []string) error {
	var olderThan time.Duration
	var batch int
	c := newDBCommand(e, "purge", "purge --older-than DURATION|--all [--batch N]")
	olderFlag := durVar(c.FlagSet, &olderThan, "older-than", 0, "delete done messages finished longer ago than this (e.g. 7d, 36h)")
	all := c.Bool("all", false, "delete every done message")
	c.IntVar(&batch, "batch", 1000, "rows per DELETE")
	if err := c.parse(e, args); err != nil {
		return err
	}
	switch {
	case *all && olderFlag.set:
		return usagef("purge: give --older-than or --all, not both")
	case !olderFlag.set && !*all:
		return usagef("purge: --older-than is required (or --all)")
	case olderThan < 0:
		return usagef("--older-than must not be negative")
	case olderFlag.set && olderThan == 0:
		return usagef("purge: --older-than 0 deletes every done message; give --all to say so")
	case batch < 1:
		return usagef("--batch must be positive")
	}
	return c.withAdmin(ctx, e, func(a *outbox.Admin) error {
		n, err := a.Purge(ctx, olderThan, &outbox.PurgeOpts{BatchSize: batch, Progress: func(total int64) {
			fmt.Fprintf(e.stderr, "purged %d...\n", total)
		}})
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "purged %d done message(s) older than %s\n", n, olderThan)
		return nil
	})
}

func noArgs(fs interface {
	Args() []string
	Name() string
}) error {
	if len(fs.Args()) > 0 {
		return usagef("%s: unexpected argument %s", fs.Name(), shownArg(fs.Args()[0]))
	}
	return nil
}

// shownArg quotes a stray argument for an error, unless it may hold a
// secret: a URL is shown redacted, a DSN-like word not at all.
func shownArg(a string) string {
	switch {
	case strings.Contains(a, "://"):
		return strconv.Quote(sinkutil.RedactURL(a))
	case strings.Contains(a, "="):
		return "(not shown: it may hold a password; flags are written --name value)"
	}
	return strconv.Quote(a)
}

func parseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return nil, usagef("%q is not a message id", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func missingIDs(want, got []int64) []int64 {
	have := make(map[int64]bool, len(got))
	for _, id := range got {
		have[id] = true
	}
	var out []int64
	for _, id := range want {
		if !have[id] {
			out = append(out, id)
		}
	}
	return out
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, " ")
}

func idList(ids []int64) string {
	if len(ids) == 0 || len(ids) > 20 {
		return ""
	}
	return ": " + joinIDs(ids)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func writeJSON(w io.Writer, v any) error { return jsonout.Write(w, v) }

// destinationLine is one destination of status: its limits, what the
// dispatchers hold of it, its pause.
func destinationLine(d outbox.DestinationStatus) string {
	var limits []string
	if d.Rate > 0 {
		limits = append(limits, fmt.Sprintf("rate %s/s, burst %d", strconv.FormatFloat(d.Rate, 'g', 6, 64), max(d.Burst, 1)))
	}
	if d.Concurrency > 0 {
		limits = append(limits, fmt.Sprintf("concurrency %d", d.Concurrency))
	}
	line := d.Name
	if len(limits) > 0 {
		line += " (" + strings.Join(limits, ", ") + ")"
	}
	if d.Dispatchers > 0 {
		line += fmt.Sprintf(": %d in flight, %d waiting for budget, %d handed back", d.InFlight, d.Waiting, d.HandedBack)
		if d.HandedBack > 0 {
			line += fmt.Sprintf(" (mean wait %s)", d.MeanWait().Round(time.Millisecond))
		}
		line += fmt.Sprintf(", over %d %s", d.Dispatchers, plural(int64(d.Dispatchers), "dispatcher", "dispatchers"))
	}
	if d.Unavailable {
		line += "; unavailable (its sink said so: held back until a probe answers)"
	}
	if p := d.Paused; p != nil {
		line += "; paused " + pauseLine(*p)
	}
	return line
}
