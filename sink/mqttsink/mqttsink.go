// Package mqttsink publishes outbox messages to an MQTT 5 broker at QoS 1:
// one PUBLISH per message, to a topic that is a template over the message
// ({aggregate_type}, {event_type}, {aggregate_id}), and a publish succeeds
// once the broker's PUBACK reports success.
//
// Each PUBLISH carries the payload byte for byte, the content type
// application/json with the UTF-8 payload format indicator, and the outbox
// metadata as user properties (Outbox-Id, Outbox-Event-Type,
// Outbox-Aggregate-Type, Outbox-Aggregate-Id, Outbox-Fencing-Token,
// Outbox-Attempt, Outbox-Created-At). MQTT has no broker-side deduplication:
// Outbox-Id is how a subscriber recognises a message it has already seen.
//
// The connection is kept by autopaho, which reconnects in the background
// with a clean start every time: a QoS 1 message whose PUBACK was lost with
// the connection is not resent by the client; Publish reports it as
// retryable and the dispatcher publishes it again, so a subscriber may
// receive it twice (same Outbox-Id).
//
// Outcomes map onto the [outbox.Sink] classification:
//
//   - PUBACK 0x00 Success or 0x10 No matching subscribers: delivered (the
//     broker accepted the message; who subscribes is not the sink's
//     business).
//   - PUBACK 0x90 Topic Name invalid, 0x99 Payload format invalid:
//     [outbox.Permanent].
//   - PUBACK 0x87 Not authorized (an ACL denies the topic):
//     [outbox.Unavailable], a condition of the sink's credentials (an ACL
//     changed during a rotation, a grant not made yet), not of the message.
//   - PUBACK 0x80 Unspecified error, 0x83 Implementation specific error,
//     0x91 Packet Identifier in use, 0x97 Quota exceeded and any other
//     failure code: [outbox.Retryable].
//   - No connection (while autopaho reconnects), a connection lost before
//     the PUBACK, a cancelled or expired context: [outbox.Retryable]; but
//     while the broker refuses the connection itself for a reason only
//     configuration can fix (CONNACK 0x84 unsupported protocol version, 0x85
//     client identifier not valid, 0x86 bad user name or password, 0x87 not
//     authorized, 0x8A banned, 0x8C bad authentication method), or the TLS
//     handshake fails over a certificate: [outbox.Unavailable], so a
//     password rotation delays messages without spending their attempts.
//   - A message the broker cannot take whatever happens (a PUBLISH larger
//     than the broker's Maximum Packet Size, a topic or metadata that is not
//     valid MQTT UTF-8, a topic starting with '$'): [outbox.Permanent],
//     without sending it.
package mqttsink

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// Defaults for the URL's query parameters and the connection.
const (
	// TopicDefault is the topic template when the URL has no topic=.
	TopicDefault = "outbox/{aggregate_type}/{event_type}"
	// ClientIDPrefix starts the random client id used when the URL has no
	// client_id=.
	ClientIDPrefix = "outboxd-"
	// KeepAliveDefault is the MQTT keep-alive when the URL has no keepalive=.
	KeepAliveDefault = 30 * time.Second
	// ConnectTimeoutDefault bounds one connection attempt (TCP, TLS,
	// CONNECT/CONNACK) when the URL has no connect_timeout=.
	ConnectTimeoutDefault = 10 * time.Second
	// ReconnectMaxDelay caps the delay between reconnection attempts.
	ReconnectMaxDelay = 5 * time.Second
	// CloseTimeout bounds how long Close waits for the DISCONNECT and the
	// client's goroutines.
	CloseTimeout = 5 * time.Second
)

// maxPacketSize is the largest packet MQTT can encode (a 4-byte variable
// byte integer of remaining length, plus the fixed header).
const maxPacketSize = 268435455 + 5

// packetTimeout bounds a PUBACK wait for a caller whose context has no
// deadline; the publish context is the real bound.
const packetTimeout = 5 * time.Minute

// errConnectionLost cancels the publishes waiting on a connection that went
// down: autopaho reconnects with a clean start, so their PUBACKs can never
// arrive.
var errConnectionLost = errors.New("connection to the broker lost before PUBACK; the message may have been delivered")

// Options configures a [Sink] beyond what the URL says. A nil *Options means
// all defaults.
type Options struct {
	// Logger receives connection events (up, lost, refused) and the error
	// lines of the client library (autopaho, paho). Defaults to
	// discarding them.
	Logger *slog.Logger
	// TLSConfig is used for mqtts:// URLs (it is cloned; an empty ServerName
	// is set to the URL's host). Defaults to the system roots and the URL's
	// host as ServerName.
	TLSConfig *tls.Config
}

// Sink is an [outbox.Sink] publishing to an MQTT 5 broker. It is safe for
// concurrent use: publishes share one connection and are in flight together,
// up to the broker's Receive Maximum.
type Sink struct {
	addr  string
	cm    *autopaho.ConnectionManager
	desc  string
	log   *slog.Logger
	topic *sinkutil.Template

	mu sync.Mutex
	// conn is cancelled when the current connection goes down; nil while
	// there is none.
	conn       context.Context
	connCancel context.CancelCauseFunc
	// maxPacket is the broker's Maximum Packet Size (0: none announced).
	maxPacket uint32
	// refused is the last connection attempt's failure while there is no
	// connection, for classification.
	refused error
	// changed is closed (and replaced) when a connection comes up or an
	// attempt fails, waking the publishes waiting for a connection.
	changed chan struct{}
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink for rawURL:
//
//	mqtt://[user:password@]host[:port][?param=value&...]
//	mqtts://... (TLS)
//
// with the query parameters topic (topic template, default
// [TopicDefault]), client_id (default [ClientIDPrefix] plus 16 random hex
// digits), keepalive (a Go duration, default [KeepAliveDefault]) and
// connect_timeout (default [ConnectTimeoutDefault]). The port defaults to
// 1883, or 8883 for mqtts.
//
// New returns at once: the connection is made in the background and kept up
// until Close. A broker that is down at New gives a Sink whose publishes wait
// for the connection until their context ends, then fail as retryable.
func New(rawURL string, opts *Options) (*Sink, error) {
	c, opts, err := sinkutil.Prepare(rawURL, opts, parseURL)
	if err != nil {
		return nil, err
	}
	if c.clientID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.clientID = ClientIDPrefix + hex.EncodeToString(b[:])
	}
	s := &Sink{
		addr:    net.JoinHostPort(c.host, c.port),
		log:     sinkutil.Logger(opts.Logger),
		topic:   c.topic,
		changed: make(chan struct{}),
	}
	s.desc = describe(c.u.Scheme, c.u.User, s.addr, c.topic, c.clientID, c.keepAlive, c.connectTimeout)
	cfg := s.clientConfig(c, opts)
	// The connection manager lives until Close (Disconnect cancels it).
	s.cm, err = autopaho.NewConnection(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("mqttsink: %w", err)
	}
	return s, nil
}

func describe(scheme string, user *url.Userinfo, addr string, topic *sinkutil.Template, clientID string, keepAlive, connectTimeout time.Duration) string {
	return fmt.Sprintf("%s://%s%s?topic=%s&client_id=%s&keepalive=%s&connect_timeout=%s",
		scheme, sinkutil.ShownUserinfo(user), addr, topic, clientID, keepAlive, connectTimeout)
}

// clientConfig is the connection manager's configuration for c.
func (s *Sink) clientConfig(c *urlConfig, opts *Options) autopaho.ClientConfig {
	// The server URL autopaho sees has no userinfo, so no error it builds
	// can carry the password.
	server := &url.URL{Scheme: c.u.Scheme, Host: s.addr}
	cfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{server},
		KeepAlive:                     uint16(c.keepAlive / time.Second),
		CleanStartOnInitialConnection: true,
		SessionExpiryInterval:         0,
		ReconnectBackoff:              autopaho.NewExponentialBackoff(100*time.Millisecond, ReconnectMaxDelay, 500*time.Millisecond, 2),
		ConnectTimeout:                c.connectTimeout,
		// autopaho clears Clean Start after the first connection, to resume
		// the session; the sink never resumes one (a publish whose PUBACK
		// was lost is reported retryable instead), so every connection
		// starts clean and the broker keeps no state for the client id.
		ConnectPacketBuilder: func(cp *paho.Connect, _ *url.URL) (*paho.Connect, error) {
			cp.CleanStart = true
			return cp, nil
		},
		OnConnectionUp:   s.connectionUp,
		OnConnectionDown: s.connectionDown,
		OnConnectError:   s.connectError,
		// The client library's own error lines (a queue entry it could not
		// read, a session it could not close) join the sink's log; its
		// debug lines are not wanted.
		Errors:     libraryLog("mqttsink: autopaho", s.log),
		PahoErrors: libraryLog("mqttsink: paho", s.log),
		ClientConfig: paho.ClientConfig{
			ClientID:      c.clientID,
			PacketTimeout: packetTimeout,
		},
	}
	if c.u.User != nil {
		cfg.ConnectUsername = c.u.User.Username()
		if pw, ok := c.u.User.Password(); ok {
			cfg.ConnectPassword = []byte(pw)
		}
	}
	if c.u.Scheme == "mqtts" {
		cfg.TlsCfg = sinkutil.TLSConfig(opts.TLSConfig, c.host)
	}
	return cfg
}

// String describes the sink as a URL with the password hidden and every
// option spelled out, for logs.
func (s *Sink) String() string { return s.desc }

func (s *Sink) connectionUp(_ *autopaho.ConnectionManager, ca *paho.Connack) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conn, s.connCancel = context.WithCancelCause(context.Background())
	s.maxPacket = 0
	if ca.Properties != nil && ca.Properties.MaximumPacketSize != nil {
		s.maxPacket = *ca.Properties.MaximumPacketSize
	}
	s.refused = nil
	close(s.changed)
	s.changed = make(chan struct{})
	s.log.Info("mqttsink: connected", slog.String("sink", s.desc))
}

func (s *Sink) connectionDown() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connCancel != nil {
		s.connCancel(errConnectionLost)
	}
	s.conn, s.connCancel = nil, nil
	s.log.Warn("mqttsink: connection lost; reconnecting", slog.String("sink", s.desc))
	return true
}

func (s *Sink) connectError(err error) {
	s.mu.Lock()
	s.refused = err
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	s.log.Warn("mqttsink: connection attempt failed", slog.String("sink", s.desc), slog.Any("error", err))
}

// awaitConnection returns the current connection's context, waiting for one
// until ctx ends.
func (s *Sink) awaitConnection(ctx context.Context, topic string) (context.Context, uint32, error) {
	for {
		s.mu.Lock()
		conn, maxPacket, refused, changed := s.conn, s.maxPacket, s.refused, s.changed
		s.mu.Unlock()
		if conn != nil {
			return conn, maxPacket, nil
		}
		if refused != nil && isRefusal(refused) {
			return nil, 0, outbox.Unavailable(fmt.Errorf("mqttsink: PUBLISH %s on %s: broker refuses the connection: %w", topic, s.addr, refused))
		}
		select {
		case <-changed:
		case <-ctx.Done():
			err := fmt.Errorf("mqttsink: PUBLISH %s on %s: not connected: %w", topic, s.addr, ctx.Err())
			if refused != nil {
				err = fmt.Errorf("%w (last attempt: %v)", err, refused) //nolint:errorlint // only the context error classifies it; the refusal is context for the reader
			}
			return nil, 0, outbox.Retryable(err)
		}
	}
}

// Publish sends msg at QoS 1 and returns once the broker's PUBACK arrives,
// classified as in the package doc.
func (s *Sink) Publish(ctx context.Context, msg *outbox.Message) error {
	p, err := s.packet(msg)
	if err != nil {
		return err
	}
	topic := p.Topic
	if err := ctx.Err(); err != nil {
		return outbox.Retryable(fmt.Errorf("mqttsink: PUBLISH %s on %s: %w", topic, s.addr, err))
	}
	conn, maxPacket, err := s.awaitConnection(ctx, topic)
	if err != nil {
		return err
	}
	limit := uint32(maxPacketSize)
	if maxPacket > 0 {
		limit = maxPacket
	}
	if size := packetSize(p); size > int(limit) {
		return outbox.Permanent(fmt.Errorf("mqttsink: PUBLISH %s on %s: message %d is %d bytes as a PUBLISH packet, over the broker's maximum packet size of %d", topic, s.addr, msg.ID, size, limit))
	}

	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(conn, func() { cancel(context.Cause(conn)) })
	defer stop()

	resp, err := s.cm.Publish(pctx, p)
	if err == nil {
		return nil
	}
	return s.publishError(ctx, pctx, topic, resp, err)
}

// packet builds msg's PUBLISH packet; a topic or header MQTT cannot carry
// is a permanent error.
func (s *Sink) packet(msg *outbox.Message) (*paho.Publish, error) {
	topic := s.topic.Expand(msg, sanitize)
	if err := checkTopic(topic); err != nil {
		return nil, outbox.Permanent(fmt.Errorf("mqttsink: message %d: topic %q: %w", msg.ID, topic, err))
	}
	headers := reservedHeaders.Headers(msg)
	props := make(paho.UserProperties, 0, len(headers))
	for _, h := range headers {
		if !validUTF8(h.Value) {
			return nil, outbox.Permanent(fmt.Errorf("mqttsink: message %d: %s is not valid MQTT UTF-8 (invalid UTF-8 or NUL)", msg.ID, h.Key))
		}
		props = append(props, paho.UserProperty{Key: h.Key, Value: h.Value})
	}
	utf8Payload := byte(1)
	return &paho.Publish{
		QoS:     1,
		Topic:   topic,
		Payload: msg.Payload,
		Properties: &paho.PublishProperties{
			ContentType:   "application/json",
			PayloadFormat: &utf8Payload,
			User:          props,
		},
	}, nil
}

// publishError classifies a failed PUBLISH: ctx is the caller's context,
// pctx the publish's own (cancelled with errConnectionLost when the
// connection drops).
func (s *Sink) publishError(ctx, pctx context.Context, topic string, resp *paho.PublishResponse, err error) error {
	if resp != nil && resp.ReasonCode >= 0x80 {
		reason := ""
		if resp.Properties != nil {
			reason = resp.Properties.ReasonString
		}
		return classifyPuback(resp.ReasonCode, reason, fmt.Sprintf("PUBLISH %s on %s", topic, s.addr))
	}
	err = fmt.Errorf("mqttsink: PUBLISH %s on %s: %w", topic, s.addr, err)
	switch {
	case ctx.Err() != nil:
		return outbox.Retryable(fmt.Errorf("%w (no PUBACK yet: %w)", err, ctx.Err()))
	case errors.Is(context.Cause(pctx), errConnectionLost):
		return outbox.Retryable(fmt.Errorf("mqttsink: PUBLISH %s on %s: %w", topic, s.addr, errConnectionLost))
	case errors.Is(err, paho.ErrInvalidArguments):
		// paho refuses what the broker announced it cannot take (QoS 1
		// above its Maximum QoS, for one): the same on every retry.
		return outbox.Permanent(err)
	}
	return outbox.Retryable(err)
}

// classifyPuback maps a PUBACK failure reason code (>= 0x80) to a retryable
// or permanent error; op names the publish in the error text.
func classifyPuback(code byte, reason, op string) error {
	name, known := pubackNames[code]
	if !known {
		name = "reason code 0x" + strconv.FormatUint(uint64(code), 16)
	}
	text := fmt.Sprintf("mqttsink: %s: broker answered %s (0x%02X)", op, name, code)
	if reason != "" {
		text += ": " + reason
	}
	err := errors.New(text)
	switch code {
	case 0x87:
		// Not authorized: an ACL denies the topic to the sink's user, which
		// an operator fixes on the broker.
		return outbox.Unavailable(err)
	case 0x90, 0x99:
		// Topic Name invalid, Payload format invalid: the same message
		// meets the same answer.
		return outbox.Permanent(err)
	default:
		// Unspecified and implementation-specific errors, a packet id
		// clash, a quota (rate or volume) that passes, and codes newer than
		// this list.
		return outbox.Retryable(err)
	}
}

var pubackNames = map[byte]string{
	0x80: "Unspecified error",
	0x83: "Implementation specific error",
	0x87: "Not authorized",
	0x90: "Topic Name invalid",
	0x91: "Packet Identifier in use",
	0x97: "Quota exceeded",
	0x99: "Payload format invalid",
}

// isRefusal reports a connection refusal that only configuration can fix
// (credentials, client id, protocol version, a certificate either side
// refuses); other refusals (server unavailable or busy, quota, rate limits)
// and network failures pass.
func isRefusal(err error) bool {
	if sinkutil.IsCertificateError(err) {
		return true
	}
	var ce *autopaho.ConnackError
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.ReasonCode {
	case 0x84, // Unsupported Protocol Version
		0x85, // Client Identifier not valid
		0x86, // Bad User Name or Password
		0x87, // Not authorized
		0x8A, // Banned
		0x8C: // Bad authentication method
		return true
	}
	return false
}

// Close disconnects from the broker and stops the connection manager,
// waiting up to [CloseTimeout] for it.
func (s *Sink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
	defer cancel()
	if err := s.cm.Disconnect(ctx); err != nil {
		return fmt.Errorf("mqttsink: close: %w", err)
	}
	return nil
}

// sanitize makes a placeholder's value one topic level: '/' would add
// levels, '+' and '#' are wildcards a topic name cannot hold, NUL and
// invalid UTF-8 are not allowed in MQTT strings.
func sanitize(v string) string {
	v = strings.ToValidUTF8(v, "_")
	return strings.Map(func(r rune) rune {
		switch r {
		case '/', '+', '#', 0:
			return '_'
		}
		return r
	}, v)
}

func checkTopic(topic string) error {
	switch {
	case topic == "":
		return errors.New("empty topic name")
	case len(topic) > 65535:
		return errors.New("topic name longer than 65535 bytes")
	case strings.HasPrefix(topic, "$"):
		return errors.New("topics starting with $ are reserved for the broker")
	}
	return nil
}

// validUTF8 reports whether s is an MQTT UTF-8 string: valid UTF-8 without
// U+0000, at most 65535 bytes.
func validUTF8(s string) bool {
	return len(s) <= 65535 && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// packetSize returns the encoded size in bytes of p as a QoS 1 or 2 PUBLISH
// packet, to compare with the broker's Maximum Packet Size before sending.
func packetSize(p *paho.Publish) int {
	props := 0
	if pp := p.Properties; pp != nil {
		if pp.PayloadFormat != nil {
			props += 2
		}
		if pp.MessageExpiry != nil {
			props += 5
		}
		if pp.ContentType != "" {
			props += 3 + len(pp.ContentType)
		}
		if pp.ResponseTopic != "" {
			props += 3 + len(pp.ResponseTopic)
		}
		if pp.CorrelationData != nil {
			props += 3 + len(pp.CorrelationData)
		}
		if pp.TopicAlias != nil {
			props += 3
		}
		for _, u := range pp.User {
			props += 5 + len(u.Key) + len(u.Value)
		}
	}
	remaining := 2 + len(p.Topic) + varIntLen(props) + props + len(p.Payload)
	if p.QoS > 0 {
		remaining += 2 // packet identifier
	}
	return 1 + varIntLen(remaining) + remaining
}

func varIntLen(n int) int {
	switch {
	case n < 128:
		return 1
	case n < 16384:
		return 2
	case n < 2097152:
		return 3
	}
	return 4
}

// libraryLog returns a logger for the client library's error lines, at
// warn level under msg.
func libraryLog(msg string, logger *slog.Logger) *sinkutil.LibraryLog {
	l := sinkutil.NewLibraryLog(msg, slog.LevelWarn)
	l.Use(logger)
	return l
}
