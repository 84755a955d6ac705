package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/bench"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// benchOpts are the inputs of one bench run.
type benchOpts struct {
	messages  int
	doneRows  int
	aggs      int
	variant   string
	rf        runFlags
	keep      bool
	producers int
	rounds    int
	duration  time.Duration
	latency   bool
	rate      int
	shards    int
	holdSnap  bool
	holdWrite bool
	cpuProf   string
	tenants   int
}

// shardCount is how many shards the bench tables get: none unless the
// dispatcher runs on shard leases or snapshot cursors.
func (o *benchOpts) shardCount() int {
	if m := outbox.LeaseMode(o.rf.leaseMode); m != outbox.LeaseShards && m != outbox.LeaseCursor {
		return 0
	}
	return o.shards
}

func runBench(ctx context.Context, e *env, args []string) error {
	var (
		o  benchOpts
		lf logFlags
	)
	c := newDBCommand(e, "bench", "bench [--messages N] [--done-rows N] [--variant lease|seed|both] [--sink URL] [--producers N --duration DUR] [--latency --rate N --producers N --duration DUR] [--tenants N]", &lf, &o)
	if err := c.parse(e, args); err != nil {
		return err
	}
	lf.level = cmpString(lf.level, "warn")
	logger, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	if err := o.check(c.FlagSet); err != nil {
		return err
	}
	if o.cpuProf != "" {
		stop, err := startCPUProfile(o.cpuProf)
		if err != nil {
			return err
		}
		defer stop()
	}
	cfg, err := o.rf.config("bench.outbox", logger)
	if err != nil {
		return err
	}
	sink, err := openSink(o.rf.sink, &sinkEnv{stdout: io.Discard, logger: logger})
	if err != nil {
		return err
	}
	defer sink.Close()
	pool, err := c.db.connect(ctx, e, int32(max(8, o.producers+4)))
	if err != nil {
		return err
	}
	defer pool.Close()
	host, _ := os.Hostname()
	sinkName := sinkutil.RedactURL(o.rf.sink)
	if o.latency {
		sinkName = "http (local receiver)"
	}
	eff := cfg.WithDefaults()
	order := "unordered"
	if eff.Ordered {
		order = "ordered"
	}
	fmt.Fprintf(e.stdout, "outboxd bench on %s: sink %s, workers %d, batch %d, %s leases, %s\n",
		host, sinkName, o.rf.workers, eff.BatchSize, eff.LeaseMode, order)
	return bench.New(pool, &bench.Config{
		Messages: o.messages, DoneRows: o.doneRows, Aggregates: o.aggs, Variant: o.variant,
		Producers: o.producers, Rounds: o.rounds, Duration: o.duration,
		Latency: o.latency, Rate: o.rate, Keep: o.keep, Shards: o.shardCount(),
		Tenants: o.tenants, TenantPool: func(cfg *pgxpool.Config) { daemonPool(cfg, 1, c.db.resolveDSN(e)) },
		Cursor:       outbox.LeaseMode(o.rf.leaseMode) == outbox.LeaseCursor,
		HoldSnapshot: o.holdSnap, HoldWriter: o.holdWrite,
		Sink: sink,
		HTTPSink: func(url string) (outbox.Sink, error) {
			return openSink(url, &sinkEnv{stdout: e.stdout, logger: logger})
		},
		Dispatcher: func(table string) (*outbox.Config, error) { return o.rf.config(table, logger) },
		Stdout:     e.stdout, Stderr: e.stderr,
	}).Run(ctx)
}

func (o *benchOpts) register(fs *flag.FlagSet) {
	o.rf.register(fs, "null:")
	fs.IntVar(&o.messages, "messages", 200000, "messages to pre-insert and drain")
	fs.IntVar(&o.doneRows, "done-rows", 0, "done rows to pre-fill the table with (a claim must not slow down with them)")
	fs.IntVar(&o.aggs, "aggregates", 1000, "aggregates the pre-inserted messages are spread over (1: one aggregate's backlog)")
	fs.StringVar(&o.variant, "variant", "lease", "lease (outboxd), seed (the article's per-row design) or both")
	fs.IntVar(&o.producers, "producers", 0, "instead of draining: measure producer insert rates with N concurrent producers (NOTIFY cost)")
	durVar(fs, &o.duration, "duration", 5*time.Second, "length of each producer phase")
	fs.IntVar(&o.rounds, "rounds", 3, "producer phases are alternated this many times; the median counts")
	fs.BoolVar(&o.keep, "keep", false, "keep the bench schema afterwards")
	fs.IntVar(&o.shards, "shards", 16, "with --lease-mode shard or cursor: the bench table's shards")
	fs.BoolVar(&o.holdSnap, "hold-snapshot", false, "while each drain runs, another session holds a REPEATABLE READ snapshot (vacuum cannot clean up behind it)")
	fs.BoolVar(&o.holdWrite, "hold-writer", false, "while each drain runs, another session holds a transaction that has written (its id stays in progress)")
	fs.StringVar(&o.cpuProf, "cpu-profile", "", "write the relay's CPU profile of the whole run to FILE (go tool pprof FILE)")
	fs.BoolVar(&o.latency, "latency", false, "instead of draining: measure delivery latency at --rate inserts/s from --producers (default 4) through the HTTP sink to a local receiver")
	fs.IntVar(&o.tenants, "tenants", 0, "instead of draining: relay N tenant tables in one process as run --config does a pattern's (one pool, one LISTEN connection) and measure their connections, queries/s and CPU while idle for --duration (default 30s), then the throughput of --messages (default 100 per tenant, at least 20,000) inserted over them all at once")
	fs.IntVar(&o.rate, "rate", 1000, "with --latency: single-row insert transactions per second, across all producers")
}

// check refuses options that do not go together; --latency brings its
// own sink and defaults --producers to 4.
func (o *benchOpts) check(fs *flag.FlagSet) error {
	if o.messages < 1 || o.doneRows < 0 || o.producers < 0 || o.rounds < 1 {
		return usagef("--messages must be positive and --done-rows, --producers not negative")
	}
	if o.aggs < 1 {
		return usagef("--aggregates must be positive, got %d", o.aggs)
	}
	if (o.holdSnap || o.holdWrite) && (o.latency || o.producers > 0) {
		return usagef("--hold-snapshot and --hold-writer go with a drain, not with --latency or --producers")
	}
	if o.tenants < 0 {
		return usagef("--tenants must be positive, got %d", o.tenants)
	}
	if o.tenants > 0 {
		if o.latency || o.producers > 0 || o.holdSnap || o.holdWrite || o.variant != "lease" {
			return usagef("--tenants goes with neither --latency, --producers, --hold-snapshot, --hold-writer nor --variant")
		}
		if !fs.Changed("duration") {
			o.duration = 30 * time.Second
		}
		if !fs.Changed("messages") {
			o.messages = max(20000, 100*o.tenants)
		}
	}
	if o.latency {
		if fs.Changed("sink") {
			return usagef("--latency delivers through the HTTP sink to its own local receiver; drop --sink")
		}
		if o.producers == 0 {
			o.producers = 4
		}
		if o.rate < 1 {
			return usagef("--rate must be positive, got %d", o.rate)
		}
	}
	if !slices.Contains([]string{"lease", "seed", "both"}, o.variant) {
		return usagef("--variant must be lease, seed or both, got %q", o.variant)
	}
	return nil
}

// startCPUProfile profiles this process into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

func cmpString(s, def string) string {
	if s == "info" {
		return def
	}
	return s
}
