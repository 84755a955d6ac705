package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/outboxd/outbox/internal/lease"
)

// Defaults for [Config]. Each is what a zero field means.
const (
	TableDefault     = "outbox"
	WorkersDefault   = 10
	BatchSizeDefault = 100
	// BatchSizeShardsDefault is the batch under shard leases: a read there
	// writes and holds nothing, and no other dispatcher reads an owned
	// shard, so a larger batch costs no one. 1,000 ran 13% faster than 500
	// unordered with a fast sink, as fast ordered, for 352 B of WAL per
	// message instead of 345 (docs/benchmarks.md).
	BatchSizeShardsDefault = 1000
	// BatchSizeCursorDefault is the batch under snapshot cursors, where a
	// batch is also what one advance of a shard's cursor settles: the rows
	// read are written by nobody, so the batch is bounded only by what a
	// takeover may deliver again. 1,000 ran 19% faster than 500 with a
	// fast sink (docs/benchmarks.md); a slow sink's claims are cut to what
	// its workers start within half the lease as in every mode.
	BatchSizeCursorDefault = 1000
	LeaseDefault           = 60 * time.Second
	MaxAttemptsDefault     = 12
	AttemptHistoryDefault  = 20
	PollIntervalDefault    = time.Second
	PublishTimeoutDefault  = 10 * time.Second // or half the Lease, if shorter
	RetryBaseDefault       = time.Second
	RetryCapDefault        = 5 * time.Minute
	DeferDelayDefault      = 30 * time.Second
	DeferMaxAgeDefault     = 7 * 24 * time.Hour
	FetchCooldownDefault   = 50 * time.Millisecond
	// IdlePollMaxFactor times PollInterval is the default IdlePollMax.
	IdlePollMaxFactor = 30
)

// NoAttemptHistory is the [Config.AttemptHistory] that records none.
const NoAttemptHistory = -1

// NoDeferMaxAge is the [Config.DeferMaxAge] that sets no limit.
const NoDeferMaxAge time.Duration = -1

// Config configures a [Dispatcher]. The zero value is usable: every zero
// field takes the default its comment names.
type Config struct {
	// AttemptHistory is how many entries of its attempt history each
	// message keeps: every publish that did not deliver it (retried,
	// deferred or dead) is recorded, when, by which dispatcher, how long
	// it took, the receiver's status code and the error, the newest first
	// ([Admin.Attempts]). A delivery records nothing. Defaults to 20;
	// [NoAttemptHistory] records none.
	AttemptHistory int

	// BatchSize is how many rows one claim leases at most. Defaults to 100,
	// 1,000 under shard leases (BatchSizeShardsDefault) and snapshot
	// cursors (BatchSizeCursorDefault).
	// A claim takes fewer when the workers could not start more within half
	// the Lease at the running average publish duration: rows wait in the
	// dispatcher until a worker is free, and their leases are not extended
	// meanwhile.
	BatchSize int

	// DeferDelay is how long a [Defer] without its own delay postpones a
	// message. Defaults to 30s.
	DeferDelay time.Duration

	// DeferMaxAge bounds how long a message may keep being deferred, measured
	// from its created_at: a defer of an older message sends it dead instead,
	// and a defer's delay is cut to the age the message has left. Defaults
	// to 7 days. [NoDeferMaxAge] (-1) means no limit; any other negative
	// value is invalid.
	DeferMaxAge time.Duration

	// DisableNotify turns off LISTEN/NOTIFY wake-ups; the dispatcher then only
	// polls. Use it where LISTEN cannot work (PgBouncer in transaction mode).
	// Defaults to false.
	DisableNotify bool

	// Listener, when set, is the LISTEN connection the dispatcher hears its
	// table's notifications on, shared with the other dispatchers of the
	// database given the same Listener ([NewListener]); nil opens a
	// connection of the dispatcher's own. It must listen on the database
	// the pool connects to. Ignored with DisableNotify.
	Listener *Listener

	// FetchCooldown bounds how the dispatcher paces itself when it is not
	// saturated. After a claim that returned less than it asked for, it
	// waits twice the running average claim duration before claiming again,
	// and it registers as an idle listener at most once per that wait,
	// backing off while wake-ups find nothing to claim; FetchCooldown caps
	// both. On a quiet database a claim takes well under a millisecond, so
	// delivery follows a commit within a few milliseconds; when claims slow
	// down (a loaded database) the dispatcher batches more, up to this much
	// extra delivery latency. A full batch is always followed by the next
	// claim at once. Defaults to 50ms.
	FetchCooldown time.Duration

	// Flow, when set, names each message's destination and its limits
	// (messages a second, publishes in flight; [Destination]), which hold
	// over all the table's dispatchers together. A message whose
	// destination has no budget now is handed back, pending with its
	// attempt refunded, due when the budget should have room, so that one
	// slow destination does not hold back the others. route.Router is
	// one; [OneDestination] limits a whole table. Defaults to none: no
	// limits.
	Flow Destinations

	// HeartbeatInterval, when positive, turns on heartbeats: every interval
	// the dispatcher extends the leases of the rows it holds (fenced on the
	// lease version), so a publish may outlive the Lease, and a heartbeat
	// that finds a lease lost cancels that publish. It must be at most a
	// third of the Lease. Defaults to 0 (off): publishes must then end
	// within half the lease. Under shard leases the shard renewal is the
	// heartbeat: it always runs, every HeartbeatInterval or, when that is
	// 0, every third of the Lease, so publishes may always outlive it.
	HeartbeatInterval time.Duration

	// Hook observes claims, finalizes and each message's outcome (for
	// metrics). Defaults to none.
	Hook Hook

	// IDNamespace, when set, qualifies the identity every sink sends
	// ([Message.IDString]): "orders" sends "orders:UID" where the bare UID
	// would go (Idempotency-Key, ce-id, webhook-id, Nats-Msg-Id, each
	// broker's message id). The uid is unique across tables already; a
	// namespace tells receivers which table a message came from, and keeps
	// apart rows from before the uid column, which are sent under their
	// numeric id. Changing it on a live table makes receivers see every
	// message not yet delivered as new. At most 64 characters of A-Z, a-z,
	// 0-9, '.', '_' and '-'. Defaults to "" (the bare identity).
	IDNamespace string

	// Lease is how long a claim owns a row. A row still processing after its
	// lease expires may be claimed by another worker (with a new fencing
	// token). Defaults to 60s.
	Lease time.Duration

	// Logger receives the dispatcher's logs. Defaults to slog.Default().
	Logger *slog.Logger

	// MaxAttempts is how many claims a message gets: a retryable failure on
	// the last one, or a lease that expires on it, sends it dead. Defaults to 12.
	MaxAttempts int

	// Ordered makes only the head (lowest id) unfinished message of each
	// aggregate_id claimable, so each aggregate is claimed and finalized in id
	// order. A dead head blocks its aggregate until an operator retries or
	// skips it. Defaults to false.
	Ordered bool

	// LeaseMode is how messages are owned while they are delivered:
	// [LeaseRows] (a lease written on each row when it is claimed) or
	// [LeaseShards] (leases on whole shards of the table, which
	// [Admin.EnableShards] sets up; each message is written once, when
	// it is finalized) or [LeaseCursor] (snapshot cursors on shard
	// leases, which [Admin.EnableCursors] sets up; a message is written
	// only when it is not delivered). Ordered means the same under all.
	// Defaults to LeaseRows. See docs/shard-leases.md.
	LeaseMode LeaseMode

	// Owner names this dispatcher in lease_owner (for observability; the
	// fencing token, not the owner, decides who may write). Defaults to
	// "host-pid-random". Give each dispatcher its own: after a claim
	// whose reply was lost, a dispatcher gives back every row processing
	// under its owner that it does not hold.
	Owner string

	// PollInterval is how often an idle dispatcher polls for work when no
	// notification wakes it (retries coming due, or no NOTIFY). Defaults to 1s.
	PollInterval time.Duration

	// IdlePollMax is how far apart the polls of an idle dispatcher grow
	// while notifications wake it: each poll that finds nothing doubles
	// the wait, from PollInterval up to IdlePollMax, and a claim that finds
	// rows starts it again at PollInterval. A retry or defer this
	// dispatcher wrote is polled for when it comes due, whatever the wait.
	// Without notifications (the listener down, or DisableNotify) it polls
	// every PollInterval. A thousand idle tables cost the database a
	// thousand claims per PollInterval without it. Defaults to 30 times
	// PollInterval; PollInterval turns the back-off off.
	IdlePollMax time.Duration

	// PublishTimeout bounds one Publish call. Without heartbeats it must be
	// at most half the Lease, so a publish that times out still finishes with
	// its lease held. Defaults to 10s or half the Lease, whichever is
	// shorter; only an explicit value can conflict with the Lease.
	PublishTimeout time.Duration

	// RetryBase and RetryCap shape the full-jitter backoff after a retryable
	// failure: random(0, min(RetryCap, RetryBase × 2^attempt)), floored by
	// the error's own minimum delay ([RetryableAfter]), which is cut to
	// [RetryFloorMax] (1h) or RetryCap, whichever is longer. Default to 1s
	// and 5m.
	RetryBase time.Duration
	RetryCap  time.Duration

	// Table is the outbox table, "name" or "schema.name". Defaults to "outbox".
	Table string

	// Workers is how many publishes run at once. Defaults to 10.
	Workers int
}

// WithDefaults returns a copy of c (which may be nil) with zero fields set
// to their defaults.
func (c *Config) WithDefaults() *Config {
	var out Config
	if c != nil {
		out = *c
	}
	def := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	defInt := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	switch out.LeaseMode {
	case LeaseShards:
		defInt(&out.BatchSize, BatchSizeShardsDefault)
	case LeaseCursor:
		defInt(&out.BatchSize, BatchSizeCursorDefault)
	}
	defInt(&out.BatchSize, BatchSizeDefault)
	defInt(&out.MaxAttempts, MaxAttemptsDefault)
	defInt(&out.AttemptHistory, AttemptHistoryDefault)
	defInt(&out.Workers, WorkersDefault)
	def(&out.DeferDelay, DeferDelayDefault)
	def(&out.DeferMaxAge, DeferMaxAgeDefault)
	def(&out.FetchCooldown, FetchCooldownDefault)
	def(&out.Lease, LeaseDefault)
	def(&out.PollInterval, PollIntervalDefault)
	def(&out.IdlePollMax, max(min(IdlePollMaxFactor*out.PollInterval, maxPollInterval), out.PollInterval))
	def(&out.PublishTimeout, min(PublishTimeoutDefault, out.Lease/2))
	def(&out.RetryBase, RetryBaseDefault)
	def(&out.RetryCap, RetryCapDefault)
	if out.Table == "" {
		out.Table = TableDefault
	}
	if out.LeaseMode == "" {
		out.LeaseMode = LeaseRows
	}
	if out.Owner == "" {
		out.Owner = DefaultOwner()
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

// Validate reports the first invalid field of a defaulted config, as a
// [*ConfigError].
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return err
	}
	if err := c.validateBounds(); err != nil {
		return err
	}
	return nil
}

// validateBounds refuses values no deployment means: past these a number is
// a slip of the keyboard (a lease of 60000s for 60s, a batch of 1e6), and
// running it would hold rows for a day or load the database with one claim.
func (c *Config) validateBounds() *ConfigError {
	for _, b := range []struct {
		field    string
		got, max int
	}{
		{"Workers", c.Workers, maxWorkers},
		{"BatchSize", c.BatchSize, maxBatchSize},
		{"MaxAttempts", c.MaxAttempts, maxMaxAttempts},
		{"AttemptHistory", c.AttemptHistory, maxAttemptHistory},
	} {
		if b.got > b.max {
			return invalid(b.field, "must be at most %d, got %d", b.max, b.got)
		}
	}
	for _, b := range []struct {
		field    string
		got, max time.Duration
	}{
		{"Lease", c.Lease, maxLease},
		{"PollInterval", c.PollInterval, maxPollInterval},
		{"IdlePollMax", c.IdlePollMax, maxPollInterval},
		{"RetryCap", c.RetryCap, maxRetryCap},
		{"DeferDelay", c.DeferDelay, maxDeferDelay},
		{"DeferMaxAge", c.DeferMaxAge, maxDeferMaxAge},
		{"FetchCooldown", c.FetchCooldown, maxFetchCooldown},
	} {
		if b.got > b.max {
			return invalid(b.field, "must be at most %s, got %s", b.max, b.got)
		}
	}
	return nil
}

// The upper bounds of validateBounds.
const (
	maxWorkers        = 10_000
	maxBatchSize      = 10_000
	maxMaxAttempts    = 1_000
	maxAttemptHistory = 1_000
	maxLease          = 24 * time.Hour
	maxPollInterval   = 24 * time.Hour
	maxRetryCap       = 30 * 24 * time.Hour
	maxDeferDelay     = 7 * 24 * time.Hour
	maxDeferMaxAge    = 365 * 24 * time.Hour
	maxFetchCooldown  = time.Minute
)

func (c *Config) validate() *ConfigError {
	switch {
	case c.BatchSize < 1:
		return invalid("BatchSize", "must be positive, got %d", c.BatchSize)
	case c.Workers < 1:
		return invalid("Workers", "must be positive, got %d", c.Workers)
	case c.MaxAttempts < 1:
		return invalid("MaxAttempts", "must be positive, got %d", c.MaxAttempts)
	case c.AttemptHistory < NoAttemptHistory:
		return invalid("AttemptHistory", "must be positive, or -1 to record none, got %d", c.AttemptHistory)
	case c.Lease < 10*time.Millisecond:
		return invalid("Lease", "must be at least 10ms, got %s", c.Lease)
	case c.PublishTimeout <= 0:
		return invalid("PublishTimeout", "must be positive, got %s", c.PublishTimeout)
	case c.HeartbeatInterval < 0:
		return invalid("HeartbeatInterval", "must not be negative, got %s", c.HeartbeatInterval)
	case c.HeartbeatInterval > 0 && c.HeartbeatInterval*3 > c.Lease:
		return conflict("HeartbeatInterval", "Lease", "(%[2]s) must be at most a third of %[1]s (%[3]s), so a lease is extended before it runs out",
			c.HeartbeatInterval, c.Lease)
	case c.renewEvery() == 0 && c.PublishTimeout*2 > c.Lease:
		return conflict("PublishTimeout", "Lease", "(%[2]s) must be at most half of %[1]s (%[3]s), so a publish ends while its lease still holds (or turn on heartbeats)",
			c.PublishTimeout, c.Lease)
	case c.FetchCooldown < 0:
		return invalid("FetchCooldown", "must not be negative, got %s", c.FetchCooldown)
	case c.PollInterval <= 0:
		return invalid("PollInterval", "must be positive, got %s", c.PollInterval)
	case c.IdlePollMax < c.PollInterval:
		return conflict("IdlePollMax", "PollInterval", "(%[2]s) must be at least %[1]s (%[3]s)", c.IdlePollMax, c.PollInterval)
	case c.RetryBase < 0:
		return invalid("RetryBase", "must not be negative, got %s", c.RetryBase)
	case c.RetryCap < 0:
		return invalid("RetryCap", "must not be negative, got %s", c.RetryCap)
	case c.RetryCap < c.RetryBase:
		return conflict("RetryCap", "RetryBase", "(%[2]s) must be at least %[1]s (%[3]s)", c.RetryCap, c.RetryBase)
	case !validNamespace(c.IDNamespace):
		return invalid("IDNamespace", "must be at most 64 characters of A-Z, a-z, 0-9, '.', '_' and '-', got %q", c.IDNamespace)
	case c.DeferDelay < 0:
		return invalid("DeferDelay", "must not be negative, got %s", c.DeferDelay)
	case c.DeferMaxAge < 0 && c.DeferMaxAge != NoDeferMaxAge:
		return invalid("DeferMaxAge", "must not be negative, got %s", c.DeferMaxAge)
	case c.Owner == "":
		return invalid("Owner", "must not be empty")
	case flowInvalid(c.Flow) != nil:
		return invalid("Flow", "%v", flowInvalid(c.Flow))
	case c.LeaseMode != "" && c.LeaseMode != LeaseRows && c.LeaseMode != LeaseShards && c.LeaseMode != LeaseCursor:
		return invalid("LeaseMode", "must be %q, %q or %q, got %q", LeaseRows, LeaseShards, LeaseCursor, c.LeaseMode)
	}
	return nil
}

// leaseConfig is what the lease modes read of c.
func (c *Config) leaseConfig() lease.Config {
	kind := lease.Rows
	switch c.LeaseMode {
	case LeaseShards:
		kind = lease.Shards
	case LeaseCursor:
		kind = lease.Cursors
	}
	return lease.Config{
		Kind: kind, Ordered: c.Ordered, Owner: c.Owner, Lease: c.Lease, MaxAttempts: c.MaxAttempts,
		HeartbeatInterval: c.HeartbeatInterval, PublishTimeout: c.PublishTimeout, PollInterval: c.PollInterval,
		IdlePollMax: c.IdlePollMax, Window: c.window(),
	}
}

// window is how many messages a dispatcher holds at most: claimed and
// queued for the workers, publishing, or waiting for their finalize.
// Shard leases hold two batches more: their finalize, one statement per
// batch, is the slowest stage of the pipeline, and with a batch's room
// freed only once it is written, reads stalled behind it; with more read
// ahead the next finalize always has verdicts waiting, and writes them in
// larger statements (10% more throughput with a fast sink,
// docs/benchmarks.md). Snapshot cursors too: their reads were the stage
// that waited (9-13% more throughput). A takeover after a crash may
// deliver that many again.
func (c *Config) window() int {
	if c.LeaseMode == LeaseShards || c.LeaseMode == LeaseCursor {
		return 4*c.BatchSize + c.Workers
	}
	return 2*c.BatchSize + c.Workers
}

// completers is how many completers write verdicts at once, each its own
// batches on its own connection. Unordered shard leases run two: the
// finalize is their slowest stage, and a second one writes while the first
// settles its batch and gathers the next (14% more throughput with a fast
// sink, docs/benchmarks.md). Ordered, one: its batches commit in the order
// the messages were delivered, so a crash never leaves a message done
// behind an earlier one of its aggregate that is not (a takeover delivers
// again a suffix of each aggregate, in order). Snapshot cursors settle a
// read batch at a time; row leases gained nothing from a second.
func (c *Config) completers() int {
	if c.LeaseMode == LeaseShards && !c.Ordered {
		return 2
	}
	return 1
}

// renewEvery is how often the leases of rows in flight are extended while
// their publishes run ([lease.Config.RenewEvery]).
func (c *Config) renewEvery() time.Duration {
	lc := c.leaseConfig()
	return lc.RenewEvery()
}

// DefaultOwner returns "host-pid-random", unique per process start.
func DefaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// validNamespace reports whether ns may qualify message ids: short, and of
// characters no header, subject or broker id slot treats specially (no ':'
// so the id after it is unambiguous).
func validNamespace(ns string) bool {
	if len(ns) > 64 {
		return false
	}
	return strings.IndexFunc(ns, func(r rune) bool {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		return !ok
	}) < 0
}

// LeaseMode is how a dispatcher owns the messages it delivers
// ([Config.LeaseMode]).
type LeaseMode string

// Lease modes.
const (
	LeaseRows   LeaseMode = "row"
	LeaseShards LeaseMode = "shard"
	// LeaseCursor is snapshot cursors on shard leases: a shard is read as
	// windows of committed transactions and a message is written only when
	// it is not delivered. The table needs [Admin.EnableCursors]. See
	// docs/snapshot-cursors.md.
	LeaseCursor LeaseMode = "cursor"
)
