// Package redissink appends outbox messages to Redis Streams: one XADD per
// message, into a stream whose key is a template over the message
// ({aggregate_type}, {event_type}, {aggregate_id}).
//
// Each entry carries the fields id (the message's identity, the downstream dedupe
// key), event_type, aggregate_type, aggregate_id, fencing_token, attempt,
// created_at (RFC 3339, UTC) and payload (the JSON bytes as stored).
//
// Deduplication: Redis 8.6 added an idempotent producer to XADD (IDMP
// producer-id idempotent-id). When the server has it, the sink sends the
// message's identity as the idempotent id, so a re-publish of a message whose first
// XADD reply was lost adds nothing. Older servers (and forks without it)
// reject the option; the sink then falls back to a plain XADD, and a
// re-publish adds a second entry with the same id field, which consumers
// must deduplicate on.
//
// Outcomes map onto the [outbox.Sink] classification:
//
//   - XADD reply: delivered.
//   - A cancelled or expired context, network errors, timeouts, a closed or
//     exhausted connection pool, and the transient server replies LOADING,
//     BUSY, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, READONLY, OOM, MISCONF,
//     NOREPLICAS and "max number of clients": [outbox.Retryable].
//   - NOAUTH, WRONGPASS and other authentication failures, NOPERM (the ACL
//     refuses the command or the key) and a TLS certificate either side
//     refuses: [outbox.Unavailable]. These are conditions of the sink's
//     credentials (a password or ACL rotation), not of the message, so the
//     message keeps its attempt and waits for the server to accept again.
//   - WRONGTYPE (the key holds something other than a stream), syntax and
//     argument errors, an unknown command, a bad DB index, MOVED/ASK (a
//     cluster behind a standalone URL), a stream that ran out of ids and a
//     protocol error (an entry beyond the server's bulk length limit):
//     [outbox.Permanent].
//   - Any other error reply: [outbox.Retryable], since an unknown reply is
//     more likely a new transient condition than a reason to drop messages.
package redissink

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// Defaults for the URL's query parameters.
const (
	// StreamDefault is the stream key template when the URL has no stream=.
	StreamDefault = "outbox:{aggregate_type}"
	// ProducerDefault is the IDMP producer id when the URL has no producer=.
	ProducerDefault = "outboxd"
	// TimeoutDefault bounds dialing and each socket read or write when the
	// URL has no timeout=. The publish context bounds a publish as well.
	TimeoutDefault = 5 * time.Second
)

// PoolSizeDefault is the connection pool size when the URL has no
// pool_size=: go-redis sends one command per connection at a time, so the
// pool bounds how many publishes are in flight at once. It is sized above the
// dispatcher's usual worker counts.
var PoolSizeDefault = max(64, 10*runtime.GOMAXPROCS(0))

// IDMP modes (the idmp= query parameter).
const (
	// IDMPAuto uses XADD IDMP while the server accepts it and falls back to a
	// plain XADD, for the rest of the sink's life, the first time the server
	// rejects the option.
	IDMPAuto = "auto"
	// IDMPOn always sends IDMP; a server without it fails every publish as
	// permanent, since only configuration can fix that.
	IDMPOn = "on"
	// IDMPOff never sends IDMP.
	IDMPOff = "off"
)

const (
	idmpUnknown int32 = iota
	idmpSupported
	idmpUnsupported
)

// Options configures a [Sink] beyond what the URL says. A nil *Options means
// all defaults.
type Options struct {
	// Logger receives the sink's rare notices (IDMP detected or not), and
	// the lines go-redis logs itself (a dial that failed, at warn level,
	// message "redissink: go-redis"), which go-redis otherwise writes as
	// text to stderr. go-redis has one logger per process: the last sink
	// built with a Logger receives them.
	// Defaults to discarding them.
	Logger *slog.Logger
	// TLSConfig is used for rediss:// URLs (it is cloned; an empty
	// ServerName is set to the URL's host). Defaults to the system roots
	// and the URL's host as ServerName.
	TLSConfig *tls.Config
}

// Sink is an [outbox.Sink] appending to Redis Streams. It is safe for
// concurrent use: publishes run in parallel on a pool of connections.
type Sink struct {
	addr   string
	client *redis.Client
	// cmd sends the XADDs: the client itself (one command per pooled
	// connection at a time) or its autopipeliner (pipeline=on).
	cmd interface {
		XAdd(ctx context.Context, a *redis.XAddArgs) *redis.StringCmd
	}
	desc     string
	idmp     string
	log      *slog.Logger
	maxLen   int64
	producer string
	stream   *sinkutil.Template
	support  atomic.Int32
	// wg tracks the goroutine behind each publish, which may outlive a
	// Publish whose context ended; Close waits for them.
	wg sync.WaitGroup
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink for rawURL:
//
//	redis://[user:password@]host[:port][/db][?param=value&...]
//	rediss://... (TLS)
//
// with the query parameters stream (key template, default [StreamDefault]),
// maxlen (approximate MAXLEN trimming, default 0: none), idmp
// ([IDMPAuto], [IDMPOn] or [IDMPOff]; default auto), producer (the IDMP
// producer id, default [ProducerDefault]), pipeline (on: batch the XADDs of
// concurrent publishes into pipelines on one connection with go-redis's
// autopipeliner; default off: one XADD per pooled connection at a time),
// pool_size (default [PoolSizeDefault]) and timeout (a Go duration, default
// [TimeoutDefault]).
// The port defaults to 6379 and db to 0.
//
// New does not contact the server: connections are made on demand, so a
// server that is down at New gives a Sink whose publishes fail as retryable
// until it comes up.
func New(rawURL string, opts *Options) (*Sink, error) {
	c, opts, err := sinkutil.Prepare(rawURL, opts, parseURL)
	if err != nil {
		return nil, err
	}
	s := &Sink{
		addr:     c.addr,
		idmp:     c.idmp,
		log:      sinkutil.Logger(opts.Logger),
		maxLen:   c.maxLen,
		producer: c.producer,
		stream:   c.stream,
	}
	if opts.Logger != nil {
		routeLibraryLog(opts.Logger)
	}
	s.desc = describe(c)
	s.client = redis.NewClient(clientOptions(c, opts))
	s.cmd = s.client
	if c.pipeline {
		ap, err := s.client.AutoPipeline()
		if err != nil {
			_ = s.client.Close()
			return nil, fmt.Errorf("redissink: pipeline=on: %w", err)
		}
		s.cmd = ap
	}
	return s, nil
}

// clientOptions are the go-redis options for c.
func clientOptions(c *config, opts *Options) *redis.Options {
	ro := &redis.Options{
		Addr:     c.addr,
		DB:       c.db,
		PoolSize: c.poolSize,
		// One connection per concurrent publish: keeping as many idle as
		// the pool holds avoids re-dialing under a steady load.
		MaxIdleConns:          c.poolSize,
		DialTimeout:           c.timeout,
		ReadTimeout:           c.timeout,
		WriteTimeout:          c.timeout,
		PoolTimeout:           c.timeout,
		ContextTimeoutEnabled: true,
		// CLIENT SETINFO does not exist before Redis 7.2; skipping it saves
		// a failing round trip per new connection there.
		DisableIdentity: true,
	}
	if c.u.User != nil {
		ro.Username = c.u.User.Username()
		ro.Password, _ = c.u.User.Password()
	}
	if c.u.Scheme == "rediss" {
		ro.TLSConfig = sinkutil.TLSConfig(opts.TLSConfig, c.u.Hostname())
	}
	return ro
}

// String describes the sink as a URL with the password hidden and every
// option spelled out, for logs.
func (s *Sink) String() string { return s.desc }

func describe(c *config) string {
	user := sinkutil.ShownUserinfo(c.u.User)
	onOff := map[bool]string{false: "off", true: "on"}
	return fmt.Sprintf("%s://%s%s/%d?stream=%s&maxlen=%d&idmp=%s&producer=%s&pipeline=%s&pool_size=%d&timeout=%s",
		c.u.Scheme, user, c.addr, c.db, c.stream, c.maxLen, c.idmp, c.producer, onOff[c.pipeline], c.poolSize, c.timeout)
}

// Publish appends msg to its stream and returns once Redis has replied with
// the entry id. A publish whose context ends first returns at once as
// retryable; the entry may still have been added.
func (s *Sink) Publish(ctx context.Context, msg *outbox.Message) error {
	key := s.stream.Expand(msg, nil)
	if key == "" {
		return outbox.Permanent(fmt.Errorf("redissink: stream template %q gives an empty key for message %d", s.stream, msg.ID))
	}
	if err := ctx.Err(); err != nil {
		return outbox.Retryable(fmt.Errorf("redissink: XADD %s on %s: %w", key, s.addr, err))
	}
	// go-redis applies a context's deadline to the socket but does not watch
	// for cancellation while waiting for a reply, so the command runs in its
	// own goroutine and Publish stops waiting when ctx is done.
	done := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		done <- s.xadd(ctx, key, msg)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return outbox.Retryable(fmt.Errorf("redissink: XADD %s on %s: no reply: %w", key, s.addr, ctx.Err()))
	}
}

func (s *Sink) xadd(ctx context.Context, key string, msg *outbox.Message) error {
	a := &redis.XAddArgs{
		Stream: key,
		Values: []any{
			"id", msg.IDString(),
			"row_id", strconv.FormatInt(msg.ID, 10),
			"event_type", msg.EventType,
			"aggregate_type", msg.AggregateType,
			"aggregate_id", msg.AggregateID,
			"fencing_token", strconv.FormatInt(msg.FencingToken, 10),
			"attempt", strconv.Itoa(msg.Attempt),
			"created_at", msg.CreatedAt.UTC().Format(time.RFC3339Nano),
			"payload", []byte(msg.Payload),
		},
	}
	if len(msg.Headers) > 0 {
		// Producer headers (trace context...) travel as one JSON field.
		if h, err := json.Marshal(msg.Headers); err == nil {
			a.Values = append(a.Values.([]any), "headers", h)
		}
	}
	if s.maxLen > 0 {
		a.MaxLen = s.maxLen
		a.Approx = true
	}
	idmp := s.idmp == IDMPOn || (s.idmp == IDMPAuto && s.support.Load() != idmpUnsupported)
	if idmp {
		a.ProducerID = s.producer
		a.IdempotentID = msg.DedupeKey() // a replay is not the original's duplicate
	}
	err := s.cmd.XAdd(ctx, a).Err()
	if err == nil {
		if idmp && s.support.CompareAndSwap(idmpUnknown, idmpSupported) {
			s.log.Info("redissink: server supports XADD IDMP; duplicates are dropped by Redis", slog.String("sink", s.desc))
		}
		return nil
	}
	if idmp && idmpRejected(err) {
		if s.idmp == IDMPOn {
			return outbox.Permanent(fmt.Errorf("redissink: XADD %s on %s: server rejects IDMP (needs Redis 8.6 or later; use idmp=auto or idmp=off): %w", key, s.addr, err))
		}
		if s.support.Swap(idmpUnsupported) != idmpUnsupported {
			s.log.Info("redissink: server has no XADD IDMP; using plain XADD, consumers must deduplicate on the id field",
				slog.String("sink", s.desc), slog.String("reply", err.Error()))
		}
		// The rejected command added nothing, so sending it again without
		// the option cannot duplicate the entry.
		a.ProducerID, a.IdempotentID = "", ""
		if err = s.cmd.XAdd(ctx, a).Err(); err == nil {
			return nil
		}
	}
	return classify(fmt.Errorf("redissink: XADD %s on %s: %w", key, s.addr, err))
}

// idmpRejected reports whether err is how a server without IDMP answers an
// XADD that has it: it parses "IDMP" as the entry id, or calls the command
// a syntax error. Nothing else in the sink's fixed-form XADD can cause
// either.
func idmpRejected(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Error())
	return strings.Contains(msg, "invalid stream id") || strings.Contains(msg, "syntax error") || strings.Contains(msg, "idmp")
}

// Close closes the connections and waits for publishes still running after
// their Publish returned (closing their connections ends them).
func (s *Sink) Close() error {
	err := s.client.Close()
	s.wg.Wait()
	if errors.Is(err, redis.ErrClosed) {
		return nil
	}
	return err
}

// Error reply prefixes (after an optional "ERR ") that no retry can fix.
var permanentReplies = []string{
	"WRONGTYPE",
	"MOVED",
	"ASK",
	"syntax error",
	"Invalid stream ID",
	"unknown command",
	"unknown subcommand",
	"wrong number of arguments",
	"DB index is out of range",
	"invalid DB index",
	"SELECT is not allowed",
	"value is out of range",
	"The stream has exhausted the last possible ID",
	"Protocol error",
}

// Error reply prefixes (after an optional "ERR ") refusing the sink's
// credentials: authentication failed, or the ACL forbids the command or key.
var credentialReplies = []string{
	"NOPERM",
	"NOAUTH",
	"WRONGPASS",
	"invalid password",
	"AUTH ",
	"Client sent AUTH",
	"invalid username-password",
}

// Error reply prefixes of conditions that pass: a server loading its data,
// busy with a script, failing over, out of memory until consumers trim, or
// unable to persist until an operator frees disk.
var retryableReplies = []string{
	"LOADING",
	"BUSY",
	"TRYAGAIN",
	"CLUSTERDOWN",
	"MASTERDOWN",
	"READONLY",
	"OOM",
	"MISCONF",
	"NOREPLICAS",
	"max number of clients reached",
}

// classify wraps err as retryable, unavailable or permanent; see the
// package doc.
func classify(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return outbox.Retryable(err)
	}
	var re redis.Error
	if errors.As(err, &re) {
		reply := strings.TrimPrefix(re.Error(), "ERR ")
		switch {
		case hasAnyPrefix(reply, retryableReplies):
			return outbox.Retryable(err)
		case hasAnyPrefix(reply, credentialReplies):
			return outbox.Unavailable(err)
		case hasAnyPrefix(reply, permanentReplies):
			return outbox.Permanent(err)
		}
		return outbox.Retryable(err)
	}
	if sinkutil.IsCertificateError(err) {
		return outbox.Unavailable(err)
	}
	// Everything else is the transport: dial and socket errors, timeouts,
	// EOF on a reset connection, a closed or exhausted pool.
	return outbox.Retryable(err)
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// libraryLog receives go-redis's own log lines once a sink has a Logger.
var (
	libraryLog        = sinkutil.NewLibraryLog("redissink: go-redis", slog.LevelWarn)
	installLibraryLog sync.Once
)

// routeLibraryLog sends go-redis's process-wide log to logger. go-redis's
// default (text on stderr) stays until a sink is given a Logger.
func routeLibraryLog(logger *slog.Logger) {
	libraryLog.Use(logger)
	installLibraryLog.Do(func() { redis.SetLogger(redisLogger{}) })
}

// redisLogger is go-redis's Logging interface over libraryLog.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	libraryLog.Log(ctx, fmt.Sprintf(format, v...))
}
