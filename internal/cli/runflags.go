package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/outboxd/outbox"
)

// runFlags are the dispatcher options shared by run, demo and bench.
type runFlags struct {
	sink                                             string
	workers, batch, maxAttempts, attemptHistory      int
	lease, pollInterval, idlePollMax, publishTimeout time.Duration
	retryBase, retryCap, deferDelay, deferMaxAge     time.Duration
	heartbeat, fetchCooldown                         time.Duration
	ordered, noNotify                                bool
	owner, idNamespace, leaseMode                    string
	// fs is the flag set the flags are registered on.
	fs *flag.FlagSet
}

func (r *runFlags) register(fs *flag.FlagSet, defaultSink string) {
	r.fs = fs
	fs.StringVar(&r.sink, "sink", defaultSink, "sink URL: stdout:, http(s)://..., null:")
	fs.IntVar(&r.workers, "workers", outbox.WorkersDefault, "concurrent publishes")
	setsField(fs, "workers", "Workers")
	fs.IntVar(&r.batch, "batch", 0, fmt.Sprintf("rows per claim (default %d; %d under --lease-mode shard or cursor)", outbox.BatchSizeDefault, outbox.BatchSizeShardsDefault))
	setsField(fs, "batch", "BatchSize")
	fs.IntVar(&r.maxAttempts, "max-attempts", outbox.MaxAttemptsDefault, "claims per message before it goes dead")
	setsField(fs, "max-attempts", "MaxAttempts")
	fs.IntVar(&r.attemptHistory, "attempt-history", outbox.AttemptHistoryDefault, "failed attempts each message keeps in its history (outboxd show ID); 0 = record none")
	setsField(fs, "attempt-history", "AttemptHistory")
	fs.StringVar(&r.leaseMode, "lease-mode", string(outbox.LeaseRows), "row: a lease written on each claimed row; shard: leases on whole shards, one write per message (the table needs migrate --shards N); cursor: snapshot cursors on shard leases, a write per batch and none per message delivered (the table needs migrate --shards N --cursor)")
	setsField(fs, "lease-mode", "LeaseMode")
	fs.BoolVar(&r.ordered, "ordered", false, "deliver each aggregate_id in id order (only the head is claimable)")
	setsField(fs, "ordered", "Ordered")
	fs.BoolVar(&r.noNotify, "no-notify", false, "do not LISTEN for wake-ups; poll only (for PgBouncer transaction mode)")
	setsField(fs, "no-notify", "DisableNotify")
	fs.StringVar(&r.owner, "owner", "", "lease owner name (default host-pid-random)")
	setsField(fs, "owner", "Owner")
	fs.StringVar(&r.idNamespace, "id-namespace", "", "qualify the message id every sink sends: NAME sends NAME:42 (one per table feeding a receiver); default the bare id")
	setsField(fs, "id-namespace", "IDNamespace")
	for _, d := range []struct {
		p     *time.Duration
		name  string
		field string // of outbox.Config
		def   time.Duration
		use   string
	}{
		{&r.lease, "lease", "Lease", outbox.LeaseDefault, "lease length"},
		{&r.pollInterval, "poll-interval", "PollInterval", outbox.PollIntervalDefault, "poll interval when idle (NOTIFY wakes earlier)"},
		{&r.idlePollMax, "idle-poll-max", "IdlePollMax", 0, "an idle dispatcher that notifications wake polls less and less often, up to this (default 30 x --poll-interval; --poll-interval turns the back-off off)"},
		{&r.publishTimeout, "publish-timeout", "PublishTimeout", 0, "timeout of one publish, at most half the lease without --heartbeat under row leases (default 10s or half the lease, whichever is shorter)"},
		{&r.retryBase, "retry-base", "RetryBase", outbox.RetryBaseDefault, "backoff base"},
		{&r.retryCap, "retry-cap", "RetryCap", outbox.RetryCapDefault, "backoff cap"},
		{&r.deferDelay, "defer-delay", "DeferDelay", outbox.DeferDelayDefault, "delay of a defer that names none (HTTP 425 without Retry-After)"},
		{&r.deferMaxAge, "defer-max-age", "DeferMaxAge", outbox.DeferMaxAgeDefault, "a deferred message older than this goes dead; 0 = no limit"},
		{&r.fetchCooldown, "fetch-cooldown", "FetchCooldown", outbox.FetchCooldownDefault, "most a dispatcher that is not saturated waits between claims and between registrations as an idle listener (it waits twice the average claim duration, up to this)"},
		{&r.heartbeat, "heartbeat", "HeartbeatInterval", 0, "extend held leases this often (at most lease/3), so publishes may outlive the lease; 0 = off (under --lease-mode shard: renew the shards every lease/3)"},
	} {
		*d.p = d.def
		fs.Var(&durationFlag{d: d.p}, d.name, d.use)
		setsField(fs, d.name, d.field)
	}
}

// zeroMeans names the numeric flags whose 0 is a setting of its own (not the
// library's "use the default"), so a person may type it.
var zeroMeans = map[string]bool{"heartbeat": true, "defer-max-age": true, "attempt-history": true}

// refuseZeros refuses a zero or negative value of a numeric flag that a
// person set (by flag, environment or file): the library reads 0 as "the
// default", which is not what --batch 0 asks for. A value left at its
// default is the library's to fill.
func (r *runFlags) refuseZeros() error {
	var err error
	r.fs.Visit(func(f *flag.Flag) {
		if err != nil || zeroMeans[f.Name] || f.Annotations[configFieldAnnotation] == nil {
			return
		}
		var zero bool
		switch v := f.Value.(type) {
		case *durationFlag:
			zero = *v.d <= 0
		default:
			n, e := r.fs.GetInt(f.Name)
			zero = e == nil && n <= 0
		}
		if zero {
			err = usagef("--%s must be positive, got %s", f.Name, f.Value.String())
		}
	})
	return err
}

// configFieldAnnotation is the flag annotation naming the field of the
// library's options (outbox.Config, outbox.ReplayOpts) the flag sets: with
// the flags it is the one table from which a *outbox.ConfigError or
// *outbox.ReplayOptsError is rendered with flag names.
const configFieldAnnotation = "outbox_config_field"

// setsField records that flag name sets the library's field.
func setsField(fs *flag.FlagSet, name, field string) {
	if err := fs.SetAnnotation(name, configFieldAnnotation, []string{field}); err != nil {
		panic(err) // a flag registered under another name: a bug here
	}
}

// flagFor returns "--flag" for the flag of fs that sets a Config field, or
// the field's name when no flag sets it.
func flagFor(fs *flag.FlagSet, field string) string {
	name := field
	fs.VisitAll(func(f *flag.Flag) {
		if v := f.Annotations[configFieldAnnotation]; len(v) == 1 && v[0] == field {
			name = "--" + f.Name
		}
	})
	return name
}

// config builds the dispatcher config from the flags. The library alone
// validates it, and its *outbox.ConfigError is rendered with the flags'
// names. A zero means the library's default, as it does there, but for
// --defer-max-age, whose 0 is the library's "no limit", -1, and
// --attempt-history, whose 0 is the library's "record none", -1.
func (r *runFlags) config(table string, logger *slog.Logger) (*outbox.Config, error) {
	if err := r.refuseZeros(); err != nil {
		return nil, err
	}
	maxAge := r.deferMaxAge
	if maxAge == 0 {
		maxAge = outbox.NoDeferMaxAge
	}
	history := r.attemptHistory
	if history == 0 {
		history = outbox.NoAttemptHistory
	}
	cfg := &outbox.Config{
		Table: table, Owner: r.owner, Workers: r.workers, BatchSize: r.batch, MaxAttempts: r.maxAttempts,
		Lease: r.lease, PollInterval: r.pollInterval, IdlePollMax: r.idlePollMax, PublishTimeout: r.publishTimeout,
		RetryBase: r.retryBase, RetryCap: r.retryCap, DeferDelay: r.deferDelay, DeferMaxAge: maxAge,
		Ordered: r.ordered, DisableNotify: r.noNotify, Logger: logger, HeartbeatInterval: r.heartbeat,
		FetchCooldown: r.fetchCooldown, IDNamespace: r.idNamespace, LeaseMode: outbox.LeaseMode(r.leaseMode),
		AttemptHistory: history,
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) {
			return nil, &usageError{msg: ce.Describe(func(field string) string { return flagFor(r.fs, field) }), err: ce}
		}
		return nil, &usageError{msg: err.Error(), err: err}
	}
	return cfg, nil
}
