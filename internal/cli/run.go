package cli

import (
	"context"
	"flag"
	"log/slog"
	"time"

	"github.com/outboxd/outbox"
)

// runFlags are the dispatcher options shared by run, demo and bench.
type runFlags struct {
	sink                                         string
	workers, batch, maxAttempts                  int
	lease, pollInterval, publishTimeout          time.Duration
	retryBase, retryCap, deferDelay, deferMaxAge time.Duration
	ordered, noNotify                            bool
	owner                                        string
}

func (r *runFlags) register(fs *flag.FlagSet, defaultSink string) {
	fs.StringVar(&r.sink, "sink", defaultSink, "sink URL: stdout:, http(s)://..., null:")
	fs.IntVar(&r.workers, "workers", outbox.WorkersDefault, "concurrent publishes")
	fs.IntVar(&r.batch, "batch", outbox.BatchSizeDefault, "rows per claim")
	fs.IntVar(&r.maxAttempts, "max-attempts", outbox.MaxAttemptsDefault, "claims per message before it goes dead")
	fs.BoolVar(&r.ordered, "ordered", false, "deliver each aggregate_id in id order (only the head is claimable)")
	fs.BoolVar(&r.noNotify, "no-notify", false, "do not LISTEN for wake-ups; poll only (for PgBouncer transaction mode)")
	fs.StringVar(&r.owner, "owner", "", "lease owner name (default host-pid-random)")
	for _, d := range []struct {
		p    *time.Duration
		name string
		def  time.Duration
		use  string
	}{
		{&r.lease, "lease", outbox.LeaseDefault, "lease length"},
		{&r.pollInterval, "poll-interval", outbox.PollIntervalDefault, "poll interval when idle (NOTIFY wakes earlier)"},
		{&r.publishTimeout, "publish-timeout", outbox.PublishTimeoutDefault, "timeout of one publish (at most half the lease)"},
		{&r.retryBase, "retry-base", outbox.RetryBaseDefault, "backoff base"},
		{&r.retryCap, "retry-cap", outbox.RetryCapDefault, "backoff cap"},
		{&r.deferDelay, "defer-delay", outbox.DeferDelayDefault, "delay of a defer that names none (HTTP 425 without Retry-After)"},
		{&r.deferMaxAge, "defer-max-age", outbox.DeferMaxAgeDefault, "a deferred message older than this goes dead; 0 = no limit"},
	} {
		*d.p = d.def
		fs.Var(&durationFlag{d: d.p}, d.name, d.use)
	}
}

// config validates the flags and builds the dispatcher config.
func (r *runFlags) config(table string, logger *slog.Logger) (*outbox.Config, error) {
	for _, v := range []struct {
		name string
		n    int
	}{{"--workers", r.workers}, {"--batch", r.batch}, {"--max-attempts", r.maxAttempts}} {
		if v.n < 1 {
			return nil, usagef("%s must be positive, got %d", v.name, v.n)
		}
	}
	for _, v := range []struct {
		name string
		d    time.Duration
	}{{"--lease", r.lease}, {"--poll-interval", r.pollInterval}, {"--publish-timeout", r.publishTimeout}, {"--retry-base", r.retryBase}, {"--retry-cap", r.retryCap}, {"--defer-delay", r.deferDelay}} {
		if v.d <= 0 {
			return nil, usagef("%s must be positive, got %s", v.name, v.d)
		}
	}
	if r.deferMaxAge < 0 {
		return nil, usagef("--defer-max-age must not be negative")
	}
	maxAge := r.deferMaxAge
	if maxAge == 0 {
		maxAge = -1
	}
	cfg := &outbox.Config{
		Table: table, Owner: r.owner, Workers: r.workers, BatchSize: r.batch, MaxAttempts: r.maxAttempts,
		Lease: r.lease, PollInterval: r.pollInterval, PublishTimeout: r.publishTimeout,
		RetryBase: r.retryBase, RetryCap: r.retryCap, DeferDelay: r.deferDelay, DeferMaxAge: maxAge,
		Ordered: r.ordered, DisableNotify: r.noNotify, Logger: logger,
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return nil, usagef("%s", flagNames(err.Error()))
	}
	return cfg, nil
}

// flagNames rewrites Config field names in a validation error into the
// flags that set them.
func flagNames(msg string) string {
	for field, flag := range map[string]string{
		"PublishTimeout": "--publish-timeout", "Lease": "--lease", "RetryCap": "--retry-cap",
		"RetryBase": "--retry-base", "BatchSize": "--batch", "Workers": "--workers",
		"MaxAttempts": "--max-attempts", "PollInterval": "--poll-interval", "DeferMaxAge": "--defer-max-age",
		"DeferDelay": "--defer-delay", "Owner": "--owner",
	} {
		msg = replaceWord(msg, field, flag)
	}
	return msg
}

func replaceWord(s, old, repl string) string {
	out := []byte{}
	for i := 0; i < len(s); {
		if len(s)-i >= len(old) && s[i:i+len(old)] == old &&
			(i == 0 || !isIdent(s[i-1])) && (i+len(old) == len(s) || !isIdent(s[i+len(old)])) {
			out = append(out, repl...)
			i += len(old)
			continue
		}
		out = append(out, s[i])
		i++
	}
	return string(out)
}

func isIdent(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

func runRun(ctx context.Context, e *env, args []string) error {
	var (
		db    dbFlags
		rf    runFlags
		lf    logFlags
		drain bool
	)
	fs := newFlagSet(e, "run", "run [--sink URL] [--workers N] [--batch N] [--lease DUR] [--ordered] [--drain] ...")
	db.register(fs)
	rf.register(fs, "stdout:")
	lf.register(fs)
	fs.BoolVar(&drain, "drain", false, "exit 0 once nothing is pending or processing")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	logger, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	cfg, err := rf.config(db.table, logger)
	if err != nil {
		return err
	}
	if _, err := outbox.NewAdmin(nil, db.table); err != nil {
		return usagef("--table: %v", cleanErr(err))
	}
	sink, err := openSink(rf.sink, e.stdout)
	if err != nil {
		return err
	}
	defer sink.Close()
	pool, err := db.connect(ctx, e, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := outbox.NewDispatcher(pool, sink, cfg)
	if err != nil {
		return cleanErr(err)
	}
	stopProgress := logProgress(ctx, logger, d, 10*time.Second)
	defer stopProgress()
	if drain {
		err = d.Drain(ctx)
	} else {
		err = d.Run(ctx)
	}
	if err != nil {
		return cleanErr(err)
	}
	st := d.Stats()
	logger.Info("summary", slog.Int64("done", st.Done), slog.Int64("retried", st.Retried),
		slog.Int64("deferred", st.Deferred), slog.Int64("dead", st.Dead), slog.Int64("lease_lost", st.LeaseLost))
	return nil
}

// logProgress logs the dispatcher's counters every interval while they move.
func logProgress(ctx context.Context, logger *slog.Logger, d *outbox.Dispatcher, every time.Duration) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		var last outbox.Stats
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			st := d.Stats()
			if st == last {
				continue
			}
			rate := float64(st.Done-last.Done) / every.Seconds()
			logger.Info("progress", slog.Int64("done", st.Done), slog.Int64("retried", st.Retried),
				slog.Int64("dead", st.Dead), slog.Int64("lease_lost", st.LeaseLost), slog.Float64("done_per_second", rate))
			last = st
		}
	}()
	return func() { cancel(); <-done }
}
