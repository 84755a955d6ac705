// Package kafkasink delivers outbox messages to Apache Kafka with
// github.com/twmb/franz-go: one record per message, keyed by the aggregate
// id so that one aggregate's events stay in one partition, in order.
//
// The producer is idempotent (franz-go's default, never disabled here) and
// waits for all in-sync replicas (acks=all); it does not use Kafka
// transactions. Publish hands the record to the client and waits for the
// broker's produce acknowledgement or the end of its context, so many
// publishes are in flight at once and the client batches them per partition.
//
// Every record carries the message's identity in its Outbox-Id header and the other
// metadata of [sinkutil.Reserved.Headers] as headers; the value is the payload byte
// for byte. Kafka has no broker-side deduplication slot for an application
// id, so receivers deduplicate on Outbox-Id.
//
// Outcomes map onto the [outbox.Sink] classification:
//
//   - Acknowledged by the partition leader after all in-sync replicas: nil.
//   - No such topic (UNKNOWN_TOPIC_OR_PARTITION) with create_topics off, an
//     invalid topic name, a message too large, a record or policy the
//     broker rejects: [outbox.Permanent].
//   - A SASL authentication failure, an authorization failure (topic,
//     cluster idempotent write) or a TLS certificate either side refuses:
//     [outbox.Unavailable]. These are conditions of the sink's credentials
//     (a password or ACL rotation), so the message keeps its attempt and
//     waits for the cluster to accept again.
//   - Everything else (connection loss, leader changes, timeouts, a
//     cancelled context, a closed client, unknown broker errors):
//     [outbox.Retryable].
package kafkasink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// Defaults of the URL options, and fixed client settings.
const (
	// ClientIDDefault is the client id the brokers see (client_id).
	ClientIDDefault = "outboxd"
	// LingerDefault is how long a partition's batch waits for more records
	// before it is sent (linger). Zero, unlike franz-go's 10ms: every
	// dispatcher worker waits for its ack before publishing again, so a
	// linger is pure latency, and records still batch up behind the produce
	// requests in flight.
	LingerDefault = 0
	// MaxBufferedDefault is how many records the client holds, in flight or
	// waiting, before Publish blocks (max_buffered).
	MaxBufferedDefault = 10000
	// MetadataMinAge is the least time between two metadata refreshes,
	// which is how long a produce that hit a moved partition may wait.
	MetadataMinAge = time.Second
	// ProduceRequestTimeoutMax caps how long a broker may wait for its
	// in-sync replicas before answering a produce request.
	ProduceRequestTimeoutMax = 10 * time.Second
	// TimeoutDefault bounds how long a record may stay in the client,
	// retries included, whatever the publish context says (timeout).
	TimeoutDefault = 30 * time.Second
	// TopicDefault is the topic template used when the URL has no topic.
	TopicDefault = "outbox.{aggregate_type}"
)

// Options configures what a URL cannot. A nil *Options means all defaults.
type Options struct {
	// Dialer opens the TCP connections to the brokers, for example through
	// a SOCKS proxy or an SSH tunnel, or to map the broker addresses the
	// cluster advertises onto reachable ones. TLS, when on, runs over the
	// connections it returns. Defaults to a net.Dialer with a 10s timeout.
	Dialer func(ctx context.Context, network, address string) (net.Conn, error)
	// Logger receives the Kafka client's log at the levels it enables,
	// prefixed "kafkasink: ". Defaults to no logging.
	Logger *slog.Logger
	// TLSConfig turns TLS on with this configuration (a private CA, a client
	// certificate). An empty ServerName is set per broker from its host
	// name. Defaults to nil: TLS only if the URL says tls=true, then with
	// the system roots.
	TLSConfig *tls.Config
}

// Sink is an [outbox.Sink] that produces each message as one Kafka record.
// It is safe for concurrent use.
type Sink struct {
	auth         *authWatch
	client       *kgo.Client
	createTopics bool
	topic        *sinkutil.Template
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink for rawURL, of the form
//
//	kafka://[user:password@]host:port[,host:port...][?option=value&...]
//
// (see the README for the options). New does not contact the brokers: the
// client connects on the first publish, so a cluster that is down at start-up
// turns into retryable publishes until it is up, not into a failed start.
// Errors never contain the password.
func New(rawURL string, opts *Options) (*Sink, error) {
	c, opts, err := sinkutil.Prepare(rawURL, opts, parse)
	if err != nil {
		return nil, err
	}
	auth := newAuthWatch()
	kopts := []kgo.Opt{
		kgo.SeedBrokers(c.seeds...),
		kgo.WithHooks(auth),
		kgo.ClientID(c.clientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(c.linger),
		kgo.MaxBufferedRecords(c.maxBuffered),
		// A record lives in the client no longer than its publish
		// context (or this bound, for a context without deadline), even
		// once written to a broker: without cancellation the idempotent
		// producer keeps a written batch whose reply was lost until it
		// learns the outcome, and every retry of the message queues up
		// behind it, to be delivered all together once the broker is
		// back. Idempotence still dedupes the client's own retries.
		kgo.RecordDeliveryTimeout(c.timeout),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.ProduceRequestTimeout(min(c.timeout, ProduceRequestTimeoutMax)),
		// A produce that fails on a leader change waits for fresh
		// metadata; franz-go's 5s floor would eat half of a default
		// publish timeout.
		kgo.MetadataMinAge(MetadataMinAge),
	}
	if c.createTopics {
		kopts = append(kopts, kgo.AllowAutoTopicCreation())
	}
	if opts.Logger != nil {
		kopts = append(kopts, kgo.WithLogger(slogLogger{opts.Logger}))
	}
	kopts = append(kopts, connOpts(c, opts)...)
	client, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %w", err)
	}
	return &Sink{auth: auth, client: client, createTopics: c.createTopics, topic: c.topic}, nil
}

// connOpts are the client options that decide how it reaches and
// authenticates to the brokers: SASL, TLS and the dialer.
func connOpts(c *config, opts *Options) []kgo.Opt {
	var o []kgo.Opt
	if m := saslMechanism(c); m != nil {
		o = append(o, kgo.SASL(m))
	}
	tlsCfg := opts.TLSConfig
	if tlsCfg == nil && c.tls {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case opts.Dialer != nil && tlsCfg != nil:
		o = append(o, kgo.Dialer(tlsOver(opts.Dialer, tlsCfg)))
	case opts.Dialer != nil:
		o = append(o, kgo.Dialer(opts.Dialer))
	case tlsCfg != nil:
		o = append(o, kgo.DialTLSConfig(tlsCfg))
	}
	return o
}

func saslMechanism(c *config) sasl.Mechanism {
	switch c.sasl {
	case "plain":
		return plain.Auth{User: c.user, Pass: c.password}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: c.user, Pass: c.password}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: c.user, Pass: c.password}.AsSha512Mechanism()
	}
	return nil
}

// tlsOver runs TLS over the connections dial returns; franz-go refuses a
// custom dialer together with its own TLS option.
func tlsOver(dial func(context.Context, string, string) (net.Conn, error), cfg *tls.Config) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		raw, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				_ = raw.Close()
				return nil, err
			}
			c.ServerName = host
		}
		conn := tls.Client(raw, c)
		if err := conn.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// Publish produces msg to its topic and waits for the acknowledgement of all
// in-sync replicas or the end of ctx, whichever comes first.
//
// ctx is also the record's context in the client: when ctx ends, the client
// fails the record instead of sending it later. Two cases can still land
// after Publish has returned a retryable error, as duplicates that the
// Outbox-Id lets the receiver discard: a record already written to the
// broker (whether the broker stored it is unknown), and a record batched
// behind another publish's record, since the client checks only the first
// record's context in a batch. When the context of the first record buffered
// for a partition ends, the client fails every record buffered for that
// partition, so concurrent publishes to it may return a retryable error too.
func (s *Sink) Publish(ctx context.Context, msg *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return outbox.Retryable(fmt.Errorf("kafkasink: not produced: %w", context.Cause(ctx)))
	}
	topic := s.topic.Expand(msg, sanitize)
	if err := checkTopic(topic); err != nil {
		return outbox.Permanent(fmt.Errorf("kafkasink: topic %q for message %d: %w", topic, msg.ID, err))
	}
	hs := reservedHeaders.Headers(msg)
	headers := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		headers[i] = kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)}
	}
	rec := &kgo.Record{
		Topic: topic,
		// The default partitioner hashes keys as Kafka's Java client does
		// (murmur2), so one aggregate maps to one partition and its
		// records keep their produce order.
		Key: []byte(msg.AggregateID),
		// A copy, because the record can outlive this call (see above).
		// Never nil: a null value is a tombstone on a compacted topic.
		Value:   append([]byte{}, msg.Payload...),
		Headers: headers,
	}
	// Taken before producing, so only an authentication failure that
	// happens while this record waits can fail it.
	authFailed := s.auth.next()
	// Cancelling the record's context when Publish gives up early (on an
	// authentication failure) makes the client drop it if it is unsent.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	s.client.Produce(rctx, rec, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return s.outcome(topic, err)
	case <-authFailed:
	case <-ctx.Done():
	}
	// An ack that raced the other case still counts: reporting it as a
	// failure would only cause a duplicate.
	select {
	case err := <-done:
		return s.outcome(topic, err)
	default:
	}
	if ctx.Err() != nil {
		return outbox.Retryable(fmt.Errorf("kafkasink: topic %q: no acknowledgement before the publish context ended: %w", topic, context.Cause(ctx)))
	}
	return outbox.Unavailable(fmt.Errorf("kafkasink: topic %q: connecting to the cluster: %w", topic, s.auth.lastErr()))
}

func (s *Sink) outcome(topic string, err error) error {
	if err == nil {
		return nil
	}
	return s.classify(topic, err)
}

// Ping asks the cluster for its metadata, to check at start-up that the
// brokers are reachable and the credentials accepted.
func (s *Sink) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx); err != nil {
		return fmt.Errorf("kafkasink: ping: %w", err)
	}
	return nil
}

// Close closes the client and its connections. Records still buffered (those
// whose Publish already returned a retryable error) are dropped, not
// flushed: the dispatcher publishes them again.
func (s *Sink) Close() error {
	s.client.Close()
	return nil
}

// authWatch learns of authentication and certificate failures from the
// client's connection hook. franz-go treats a failed SASL or TLS handshake as
// a connection error and keeps the records waiting for a connection that
// will not be let in; the watch lets the publishes waiting at that moment
// fail as unavailable instead of running out their context.
type authWatch struct {
	mu  sync.Mutex
	ch  chan struct{} // closed at the next authentication failure
	err error         // the latest authentication failure
}

func newAuthWatch() *authWatch { return &authWatch{ch: make(chan struct{})} }

// next returns a channel closed at the next authentication failure.
func (w *authWatch) next() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *authWatch) lastErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (w *authWatch) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if !isAuthErr(err) && !sinkutil.IsCertificateError(err) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.err = err
	close(w.ch)
	w.ch = make(chan struct{})
}

func isAuthErr(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.IllegalSaslState)
}

// permanent lists the broker errors that retrying the same record cannot
// fix; the operator or the producer of the message must act.
var permanent = []error{
	kerr.MessageTooLarge,
	kerr.RecordListTooLarge,
	kerr.InvalidTopicException,
	kerr.InvalidRecord,
	kerr.PolicyViolation,
	kerr.InvalidRequiredAcks,
	kerr.UnsupportedForMessageFormat,
}

// refusals lists the broker errors refusing the sink's credentials: the
// operator must act, but on the cluster's users and ACLs, not the message.
var refusals = []error{
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.SaslAuthenticationFailed,
	kerr.UnsupportedSaslMechanism,
	kerr.IllegalSaslState,
}

// classify maps a failed produce onto the outbox classification. Anything
// not known to be permanent is retryable: a wasted attempt costs less than a
// message sent dead by an error this code did not foresee.
func (s *Sink) classify(topic string, err error) error {
	wrapped := fmt.Errorf("kafkasink: produce to topic %q: %w", topic, err)
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		if s.createTopics {
			// The client asked for the topic to be created; it may
			// still be propagating through the cluster.
			return outbox.Retryable(wrapped)
		}
		return outbox.Permanent(fmt.Errorf("%w (create the topic, or set create_topics=true)", wrapped))
	}
	for _, p := range refusals {
		if errors.Is(err, p) {
			return outbox.Unavailable(wrapped)
		}
	}
	if sinkutil.IsCertificateError(err) {
		return outbox.Unavailable(wrapped)
	}
	for _, p := range permanent {
		if errors.Is(err, p) {
			return outbox.Permanent(wrapped)
		}
	}
	return outbox.Retryable(wrapped)
}

// sanitize replaces each character a Kafka topic name forbids with '_'.
func sanitize(v string) string {
	return strings.Map(func(r rune) rune {
		if legalTopicRune(r) {
			return r
		}
		return '_'
	}, v)
}

func legalTopicRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// checkTopic applies Kafka's remaining topic-name rules to a sanitised name.
func checkTopic(name string) error {
	switch {
	case name == "":
		return errors.New("empty topic name")
	case name == "." || name == "..":
		return errors.New(`topic name cannot be "." or ".."`)
	case len(name) > maxTopicLen:
		return fmt.Errorf("topic name longer than %d characters", maxTopicLen)
	}
	return nil
}

var (
	probeMessage = outbox.Message{AggregateType: "x", AggregateID: "x", EventType: "x"}
	emptyMessage = outbox.Message{}
)

// slogLogger adapts a *slog.Logger to franz-go's logger.
type slogLogger struct{ l *slog.Logger }

func (s slogLogger) Level() kgo.LogLevel {
	ctx := context.Background()
	switch {
	case s.l.Enabled(ctx, slog.LevelDebug):
		return kgo.LogLevelDebug
	case s.l.Enabled(ctx, slog.LevelInfo):
		return kgo.LogLevelInfo
	case s.l.Enabled(ctx, slog.LevelWarn):
		return kgo.LogLevelWarn
	case s.l.Enabled(ctx, slog.LevelError):
		return kgo.LogLevelError
	}
	return kgo.LogLevelNone
}

func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelDebug
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelInfo:
		l = slog.LevelInfo
	}
	s.l.Log(context.Background(), l, "kafkasink: "+msg, keyvals...)
}
