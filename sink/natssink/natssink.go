// Package natssink delivers outbox messages to NATS JetStream: one message
// per outbox row, published on a subject built from a template
// (outbox.{aggregate_type}.{event_type} by default), with the row id as the
// Nats-Msg-Id deduplication key and the metadata as Outbox-* headers.
//
// Publish returns nil only once the stream's PubAck has arrived; a PubAck
// flagged Duplicate (the id was already stored within the stream's
// duplicate window) is a success too. Publishes are pipelined: each one is
// sent asynchronously and waits on its own ack future, so many are in flight
// on one connection.
//
// Outcomes map onto the [outbox.Sink] classification:
//
//   - No stream listens on the subject (no responders, stream not found):
//     [outbox.Permanent], unless the URL asks for create_stream, in which
//     case the sink (re)creates the stream and the failure is
//     [outbox.Retryable].
//   - Message larger than the server or the stream accepts, a failed
//     expected-sequence or expected-stream check, an invalid subject or
//     header: [outbox.Permanent].
//   - An authentication failure (refused, expired or revoked credentials),
//     a permissions violation on the subject, or a TLS certificate either
//     side refuses: [outbox.Unavailable]. These are conditions of the
//     sink's credentials (a rotation, a permission not granted yet), so the
//     message keeps its attempt and waits for the server to accept again.
//   - Timeouts, lost or closed connections, a reconnect in progress, too
//     many publishes in flight, a cancelled context, and any other JetStream
//     error: [outbox.Retryable].
package natssink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// Defaults of the URL parameters.
const (
	// SubjectDefault is the subject template when the URL has no subject.
	SubjectDefault = "outbox.{aggregate_type}.{event_type}"
	// TimeoutDefault bounds the wait for one PubAck when the caller's
	// context allows longer; it also bounds stream creation requests.
	TimeoutDefault = 30 * time.Second
	// ConnectTimeoutDefault bounds one connection attempt to one server.
	ConnectTimeoutDefault = 5 * time.Second
	// ReconnectWaitDefault is the pause between rounds of reconnection
	// attempts (plus up to ReconnectJitter).
	ReconnectWaitDefault = 2 * time.Second
	// MaxPendingDefault caps the publishes awaiting their PubAck.
	MaxPendingDefault = 4096
	// NameDefault is the client connection name the server shows.
	NameDefault = "outboxd"
)

const (
	// noRespondersRetries and noRespondersWait let a stream whose leader is
	// being elected answer before "no responders" is taken as "no stream",
	// which sends the message dead.
	noRespondersRetries = 4
	noRespondersWait    = 250 * time.Millisecond
	// pingInterval and maxPingsOut detect a connection that died without a
	// reset (a crashed host, a dropped route) in about 30s rather than the
	// client's default of 4 minutes.
	pingInterval = 15 * time.Second
	maxPingsOut  = 2

	// errCodeStreamNotMatch is the server's answer to a publish whose
	// Nats-Expected-Stream names another stream.
	errCodeStreamNotMatch jetstream.ErrorCode = 10060
	// errCodeSubjectOverlap is the server's refusal to create a stream whose
	// subjects overlap another stream's.
	errCodeSubjectOverlap jetstream.ErrorCode = 10065
)

// Options configures a [Sink] with what a URL cannot carry. A nil *Options
// means all defaults.
type Options struct {
	// Logger receives connection events (disconnects, reconnects, server
	// errors) and stream creation. Defaults to discarding them.
	Logger *slog.Logger
	// TLSConfig is the TLS client configuration for tls:// and nats+tls://
	// URLs (root CAs, client certificate). Setting it with a nats:// URL is
	// an error, so that a certificate is never silently unused. Defaults to
	// the system roots.
	TLSConfig *tls.Config
}

// Sink is an [outbox.Sink] publishing to NATS JetStream. It is safe for
// concurrent use.
type Sink struct {
	cfg       *config
	log       *slog.Logger
	tlsConfig *tls.Config
	// servers names the broker in errors and logs; it has no userinfo.
	servers string
	// sem bounds the publishes in flight; unlike the client's own bound it
	// gives way to a cancelled context at once.
	sem chan struct{}

	cur atomic.Pointer[conn]

	mu        sync.Mutex
	closed    bool
	redialing bool
	wg        sync.WaitGroup

	streamMu    sync.Mutex
	streamReady atomic.Bool
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink for rawURL, a nats://, tls:// or nats+tls:// URL; see
// the package README for every parameter. New connects before returning,
// bounded by connect_timeout per server; a broker that is down then does
// not fail New: the sink keeps reconnecting in the background and its
// publishes fail as retryable until the broker is back. Credentials in the
// URL never appear in errors or logs.
func New(rawURL string, opts *Options) (*Sink, error) {
	cfg, opts, err := sinkutil.Prepare(rawURL, opts, parseURL)
	if err != nil {
		return nil, err
	}
	s := &Sink{
		cfg:       cfg,
		log:       sinkutil.Logger(opts.Logger),
		tlsConfig: opts.TLSConfig,
		servers:   strings.Join(cfg.servers, ","),
		sem:       make(chan struct{}, cfg.maxPending),
	}
	if s.tlsConfig != nil && !cfg.tls {
		return nil, errors.New("natssink: Options.TLSConfig is set but the URL scheme is nats://; use tls:// or nats+tls://")
	}
	c, err := s.dial()
	if err != nil {
		return nil, err
	}
	s.cur.Store(c)
	return s, nil
}

// conn is one client connection and the JetStream context on it. A
// connection the client closed for good is replaced by a new conn.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream

	// closed is closed when the client gives the connection up, so that
	// publishes waiting on it return at once instead of at their deadline.
	closed    chan struct{}
	closeOnce sync.Once
	// ready is closed once the client has been connected.
	ready     chan struct{}
	readyOnce sync.Once

	errMu       sync.Mutex
	lastConnErr error

	// events is the head of the list of violations not fired yet; see
	// violation.
	evMu   sync.Mutex
	events atomic.Pointer[violation]
}

// violation is one permissions violation or authentication failure the
// server reported. The server sends these as asynchronous errors, never as
// an answer to the publish, so each waiting publish holds the list head it
// saw before sending and walks the list as violations fire, matching its
// subject.
type violation struct {
	fired chan struct{}
	// Set before fired is closed.
	subject string // "" matches every subject
	err     error
	next    *violation
}

func newViolation() *violation { return &violation{fired: make(chan struct{})} }

func (v *violation) matches(subject string) bool { return v.subject == "" || v.subject == subject }

func (c *conn) fire(subject string, err error) {
	c.evMu.Lock()
	defer c.evMu.Unlock()
	cur := c.events.Load()
	next := newViolation()
	cur.subject, cur.err, cur.next = subject, err, next
	c.events.Store(next)
	close(cur.fired)
}

func (c *conn) setConnErr(err error) {
	c.errMu.Lock()
	c.lastConnErr = err
	c.errMu.Unlock()
}

// authError returns the refusal of the sink's credentials or certificates
// that keeps the connection down, if that is what does.
func (c *conn) authError() error {
	if c.nc.IsConnected() {
		return nil
	}
	c.errMu.Lock()
	err := c.lastConnErr
	c.errMu.Unlock()
	if isRefusal(err) {
		return err
	}
	return nil
}

func (c *conn) markClosed() { c.closeOnce.Do(func() { close(c.closed) }) }

func (c *conn) markReady() { c.readyOnce.Do(func() { close(c.ready) }) }

var (
	publishViolationRe   = regexp.MustCompile(`(?i)publish to "([^"]+)"`)
	subscribeViolationRe = regexp.MustCompile(`(?i)subscription to "([^"]+)"`)
)

// options are the client options the URL and Options decide.
func (s *Sink) options() []nats.Option {
	o := []nats.Option{
		nats.Name(s.cfg.name),
		nats.Timeout(s.cfg.connectTimeout),
		// Never give up: outboxd must come back with the broker, without a
		// restart. Publishes made while reconnecting are buffered by the
		// client and count only once their PubAck arrives.
		nats.MaxReconnects(-1),
		nats.ReconnectWait(s.cfg.reconnectWait),
		nats.RetryOnFailedConnect(true),
		// By default the client closes the connection for good after the
		// same auth error twice; credentials fixed on the server side must
		// be picked up without a restart.
		nats.IgnoreAuthErrorAbort(),
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
	}
	switch {
	case s.cfg.user != "":
		o = append(o, nats.UserInfo(s.cfg.user, s.cfg.password))
	case s.cfg.token != "":
		o = append(o, nats.Token(s.cfg.token))
	case s.cfg.creds != "":
		o = append(o, nats.UserCredentials(s.cfg.creds))
	}
	if s.cfg.tls {
		if s.tlsConfig != nil {
			o = append(o, nats.Secure(s.tlsConfig.Clone()))
		} else {
			o = append(o, nats.Secure())
		}
	}
	return o
}

// handlers are the client's connection event handlers for c.
func (s *Sink) handlers(c *conn) []nats.Option {
	return []nats.Option{
		nats.ConnectHandler(func(*nats.Conn) {
			c.setConnErr(nil)
			c.markReady()
			s.log.Info("natssink: connected", slog.String("server", s.servers))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			c.setConnErr(nil)
			c.markReady()
			s.log.Info("natssink: reconnected", slog.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				s.log.Warn("natssink: disconnected", slog.String("server", s.servers), slog.Any("error", err))
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			c.setConnErr(err)
			if isRefusal(err) {
				c.fire("", err)
			}
			s.log.Debug("natssink: reconnect attempt failed", slog.String("server", s.servers), slog.Any("error", err))
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			c.markClosed()
			if !s.isClosed() {
				s.log.Error("natssink: connection closed by the client library; a new one will be dialled",
					slog.String("server", s.servers), slog.Any("error", nc.LastError()))
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			s.onAsyncError(c, err)
		}),
	}
}

func (s *Sink) dial() (*conn, error) {
	c := &conn{closed: make(chan struct{}), ready: make(chan struct{})}
	c.events.Store(newViolation())
	o := append(s.options(), s.handlers(c)...)
	nc, err := nats.Connect(s.servers, o...)
	if err != nil {
		return nil, fmt.Errorf("natssink: connecting to %s: %w", s.servers, err)
	}
	js, err := jetstream.New(nc,
		// The client's own bound only catches publishes abandoned by a
		// cancelled context whose ack is still due; sem bounds the rest.
		jetstream.WithPublishAsyncMaxPending(2*s.cfg.maxPending),
		// Without it an ack that never comes keeps its slot forever.
		jetstream.WithPublishAsyncTimeout(s.cfg.timeout),
		jetstream.WithDefaultTimeout(s.cfg.timeout),
	)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natssink: %w", err)
	}
	c.nc, c.js = nc, js
	if nc.IsConnected() {
		c.markReady()
	}
	return c, nil
}

func (s *Sink) onAsyncError(c *conn, err error) {
	switch {
	case errors.Is(err, nats.ErrPermissionViolation):
		if m := publishViolationRe.FindStringSubmatch(err.Error()); m != nil {
			c.fire(m[1], err)
		} else if m := subscribeViolationRe.FindStringSubmatch(err.Error()); m != nil && strings.HasPrefix(m[1], nats.InboxPrefix) {
			// Without the ack inbox no PubAck can ever arrive.
			c.fire("", err)
		}
		s.log.Error("natssink: permissions violation", slog.String("server", s.servers), slog.Any("error", err))
	case isAuthErr(err):
		c.setConnErr(err)
		c.fire("", err)
		s.log.Error("natssink: authentication failed", slog.String("server", s.servers), slog.Any("error", err))
	default:
		s.log.Warn("natssink: server error", slog.String("server", s.servers), slog.Any("error", err))
	}
}

func (s *Sink) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// current returns the live connection. A connection the client closed for
// good (it does so only on a few fatal protocol errors, since reconnects are
// unlimited) is replaced in the background while publishes fail as
// retryable.
func (s *Sink) current() (*conn, error) {
	c := s.cur.Load()
	if !c.nc.IsClosed() {
		return c, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, outbox.Retryable(errors.New("natssink: sink is closed"))
	}
	if !s.redialing && s.cur.Load() == c {
		s.redialing = true
		s.wg.Add(1)
		go s.redial(c)
	}
	return nil, outbox.Retryable(fmt.Errorf("natssink: connection to %s closed (%v); reconnecting", s.servers, c.nc.LastError())) //nolint:errorlint // LastError may be nil; the text is what matters, the error is Retryable either way
}

func (s *Sink) redial(old *conn) {
	defer s.wg.Done()
	c, err := s.dial()
	s.mu.Lock()
	s.redialing = false
	if err == nil && !s.closed && s.cur.CompareAndSwap(old, c) {
		c = nil
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Error("natssink: redial failed", slog.String("server", s.servers), slog.Any("error", err))
		return
	}
	if c != nil {
		c.nc.Close()
	}
}

// Publish sends msg and waits for its PubAck; see the package doc for the
// classification of failures.
func (s *Sink) Publish(ctx context.Context, msg *outbox.Message) error {
	subject := s.cfg.subject.Expand(msg, SanitizeToken)
	if err := ctx.Err(); err != nil {
		return s.classify(err, subject)
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.timeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		err := s.publish(ctx, subject, msg)
		if s.cfg.stream != "" && attempt == 0 && isNoStream(err) {
			// The stream was deleted since it was ensured: recreate it and
			// try once more before handing the failure back.
			s.streamReady.Store(false)
			continue
		}
		if err != nil {
			return s.classify(err, subject)
		}
		return nil
	}
}

func (s *Sink) publish(ctx context.Context, subject string, msg *outbox.Message) error {
	c, err := s.current()
	if err != nil {
		return err
	}
	// Load the violation list head before anything is sent, so that every
	// violation this publish can cause is on the list from here.
	ev := c.events.Load()
	if err := c.authError(); err != nil {
		return err
	}
	// Until its first connection the client knows nothing of the server,
	// not even that it takes headers, so publishes wait for it.
	if _, ev, err = await(ctx, c, ev, subject, "not connected yet", c.ready, nil); err != nil {
		return err
	}
	if err := s.ensureStream(ctx, c); err != nil {
		return err
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("too many publishes in flight: %w", ctx.Err())
	}
	defer func() { <-s.sem }()

	m := &nats.Msg{Subject: subject, Data: msg.Payload, Header: headers(msg)}
	stall := s.cfg.timeout
	if dl, ok := ctx.Deadline(); ok {
		stall = max(time.Until(dl), time.Millisecond)
	}
	paf, err := c.js.PublishMsgAsync(m,
		jetstream.WithRetryAttempts(noRespondersRetries),
		jetstream.WithRetryWait(noRespondersWait),
		jetstream.WithStallWait(stall),
	)
	if err != nil {
		return err
	}
	ack, _, err := await(ctx, c, ev, subject, "no PubAck", paf.Ok(), paf.Err())
	if err == nil && ack.Duplicate {
		s.log.Debug("natssink: duplicate publish", slog.String("id", msg.IDString()), slog.String("stream", ack.Stream))
	}
	return err
}

// await waits for a value on done, an error on failed, or the end of the
// publish: the connection closes, a permission violation for subject
// arrives (ev is the head of the violation list to watch; the head reached
// is returned), or ctx ends (what says what had not happened yet).
func await[T any](ctx context.Context, c *conn, ev *violation, subject, what string, done <-chan T, failed <-chan error) (T, *violation, error) {
	var zero T
	for {
		select {
		case v := <-done:
			return v, ev, nil
		case err := <-failed:
			return zero, ev, err
		case <-c.closed:
			return zero, ev, errConnClosed
		case <-ev.fired:
			if ev.matches(subject) {
				return zero, ev, ev.err
			}
			ev = ev.next
		case <-ctx.Done():
			if err := c.authError(); err != nil {
				return zero, ev, err
			}
			return zero, ev, fmt.Errorf("%s: %w", what, ctx.Err())
		}
	}
}

var errConnClosed = fmt.Errorf("connection closed before the PubAck arrived: %w", nats.ErrConnectionClosed)

// headers returns the NATS headers of msg: Nats-Msg-Id for the stream's
// deduplication, and the sinkutil metadata.
func headers(msg *outbox.Message) nats.Header {
	// Nats-* names are the server's (Nats-Msg-Id, Nats-Expected-*,
	// Nats-TTL...): a producer header among them could forge the dedupe
	// key or change how the stream stores the message.
	hs := reservedHeaders.Headers(msg)
	h := make(nats.Header, len(hs)+1)
	// A replay gets its own key, or the stream would drop it as a
	// duplicate of the original delivery within its window.
	h[jetstream.MsgIDHeader] = []string{msg.DedupeKey()}
	for _, kv := range hs {
		v := kv.Value
		switch kv.Key {
		case sinkutil.HeaderEventType, sinkutil.HeaderAggregateType, sinkutil.HeaderAggregateID:
			v = EncodeHeaderValue(v)
		}
		h[kv.Key] = []string{v}
	}
	return h
}

// ensureStream creates the create_stream stream, or adds the sink's subject
// to it, once per stream lifetime.
func (s *Sink) ensureStream(ctx context.Context, c *conn) error {
	if s.cfg.stream == "" || s.streamReady.Load() {
		return nil
	}
	s.streamMu.Lock()
	defer s.streamMu.Unlock()
	if s.streamReady.Load() {
		return nil
	}
	if err := s.createOrUpdateStream(ctx, c.js); err != nil {
		return fmt.Errorf("ensuring stream %q: %w", s.cfg.stream, err)
	}
	s.streamReady.Store(true)
	return nil
}

func (s *Sink) createOrUpdateStream(ctx context.Context, js jetstream.JetStream) error {
	for range 2 {
		st, err := js.Stream(ctx, s.cfg.stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = js.CreateStream(ctx, jetstream.StreamConfig{
				Name:       s.cfg.stream,
				Subjects:   []string{s.cfg.streamSubject},
				Duplicates: s.cfg.dupWindow,
			})
			switch {
			case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
				continue // created concurrently by another process
			case isAPIErr(err, errCodeSubjectOverlap):
				// Another stream already takes (some of) these subjects;
				// the publishes will tell whether it takes them all.
				s.log.Warn("natssink: stream not created: its subjects overlap another stream's",
					slog.String("stream", s.cfg.stream), slog.String("subject", s.cfg.streamSubject), slog.Any("error", err))
				return nil
			case err != nil:
				return err
			}
			s.log.Info("natssink: stream created", slog.String("stream", s.cfg.stream), slog.String("subject", s.cfg.streamSubject))
			return nil
		}
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		if covered(cfg.Subjects, s.cfg.streamSubject) {
			return nil
		}
		cfg.Subjects = append(cfg.Subjects, s.cfg.streamSubject)
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return err
		}
		s.log.Info("natssink: subject added to stream", slog.String("stream", s.cfg.stream), slog.String("subject", s.cfg.streamSubject))
		return nil
	}
	return errors.New("stream created and deleted concurrently")
}

// covered reports whether one of subjects matches every subject that
// subject (which may hold "*") matches.
func covered(subjects []string, subject string) bool {
	want := strings.Split(subject, ".")
	for _, s := range subjects {
		if subsetOf(want, strings.Split(s, ".")) {
			return true
		}
	}
	return false
}

func subsetOf(sub, pattern []string) bool {
	for i, p := range pattern {
		if p == ">" {
			return len(sub) > i
		}
		if i >= len(sub) {
			return false
		}
		if p != "*" && p != sub[i] {
			return false
		}
	}
	return len(sub) == len(pattern)
}

// Close closes the connection. Publishes still waiting (there should be
// none: Close comes after the last Publish returned) fail as retryable.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
	c := s.cur.Load()
	c.nc.Close()
	c.markClosed()
	return nil
}

func (s *Sink) classify(err error, subject string) error {
	if outbox.IsRetryable(err) || outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
		return err
	}
	werr := fmt.Errorf("natssink: publish to %q via %s: %w", subject, s.servers, err)
	if s.cfg.stream != "" && isNoStream(err) {
		return outbox.Retryable(werr)
	}
	if isRefusal(err) || errors.Is(err, nats.ErrPermissionViolation) {
		return outbox.Unavailable(werr)
	}
	if isPermanent(err) {
		return outbox.Permanent(werr)
	}
	return outbox.Retryable(werr)
}

// isPermanent reports whether err is a rejection that retrying cannot fix.
func isPermanent(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jetstream.JSErrCodeStreamNotFound,
			jetstream.JSErrCodeStreamMessageExceedsMaximum,
			jetstream.JSErrCodeStreamWrongLastSequence,
			jetstream.JSErrCodeStreamWrongLastSequenceConstant,
			jetstream.JSErrCodeJetStreamNotEnabledForAccount,
			errCodeStreamNotMatch:
			return true
		}
		return false
	}
	for _, target := range []error{
		jetstream.ErrNoStreamResponse,
		nats.ErrNoResponders,
		nats.ErrMaxPayload,
		nats.ErrBadSubject,
		nats.ErrBadHeaderMsg,
		nats.ErrHeadersNotSupported,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// isRefusal reports whether err is the server refusing the sink's
// credentials, or a TLS handshake failing over a certificate.
func isRefusal(err error) bool { return isAuthErr(err) || sinkutil.IsCertificateError(err) }

func isAuthErr(err error) bool {
	return err != nil && (errors.Is(err, nats.ErrAuthorization) ||
		errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrAccountAuthExpired))
}

func isNoStream(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders) ||
		isAPIErr(err, jetstream.JSErrCodeStreamNotFound)
}

func isAPIErr(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}

// SanitizeToken makes v one valid subject token: '.', the wildcards '*' and
// '>', whitespace and control characters become '_', and an empty value
// becomes "_". Other characters, non-ASCII included, are kept.
func SanitizeToken(v string) string {
	if v == "" {
		return "_"
	}
	if !strings.ContainsFunc(v, badTokenRune) {
		return v
	}
	return strings.Map(func(r rune) rune {
		if badTokenRune(r) {
			return '_'
		}
		return r
	}, v)
}

func badTokenRune(r rune) bool {
	return r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f
}

// EncodeHeaderValue encodes a free-text metadata value (event type,
// aggregate type, aggregate id) for a NATS header, whose values must be
// ASCII without CR or LF (ADR-4) and lose leading and trailing blanks in the
// client: space, double quote, percent and every byte outside printable
// ASCII become %XY of the UTF-8 bytes, as the CloudEvents HTTP binding
// encodes ce-* headers. Values without such bytes pass unchanged; receivers
// decode with a percent-decoder (Go: url.PathUnescape).
func EncodeHeaderValue(v string) string { return sinkutil.PercentEncodeHeader(v) }

// emptyMessage expands a template to its literal parts alone.
var emptyMessage = &outbox.Message{}
