// Package amqpsink delivers outbox messages to RabbitMQ (AMQP 0-9-1) with
// publisher confirms: one basic.publish per message, the payload as the
// body, the id as message_id, the metadata as headers.
//
// The sink is chosen by a URL:
//
//	amqp://user:pass@host:5672/vhost?exchange=events&routing_key=outbox.{aggregate_type}.{event_type}
//
// (amqps:// for TLS); README.md lists every parameter. Exchange and routing
// key are templates over {aggregate_type}, {event_type} and {aggregate_id}.
//
// Outcomes map onto the [outbox.Sink] classification:
//
//   - basic.ack: delivered (the broker has routed the message to every
//     queue and, for a persistent message on a durable queue, written it).
//   - basic.return of a mandatory message (no queue bound for its routing
//     key): [outbox.Permanent].
//   - A channel exception naming the message's exchange (404 no such
//     exchange), or 406 for a message over the broker's max_message_size:
//     [outbox.Permanent] for that message; the sink opens a new channel and
//     goes on.
//   - A channel exception 403 naming the message's exchange (no write
//     permission): [outbox.Unavailable], a condition of the credentials.
//   - An exchange or routing key over 255 bytes after expansion:
//     [outbox.Permanent], without touching the broker.
//   - basic.nack, a lost connection or channel before the confirm, a broker
//     that blocks publishing (memory or disk alarm), a broker that cannot be
//     reached, a done context: [outbox.Retryable].
//   - Refused credentials or vhost, or a certificate either side refuses,
//     on two connection attempts in a row: [outbox.Unavailable], so a
//     credential rotation delays messages without spending their attempts
//     (New itself fails if that happens when the sink starts).
package amqpsink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

// ConnectionNameDefault is the connection name shown by RabbitMQ's
// management UI when [Options.ConnectionName] is empty.
const ConnectionNameDefault = "outboxd"

// Options configures a [Sink] with what a URL cannot carry. A nil *Options
// means all defaults.
type Options struct {
	// ConnectionName is the connection_name client property, which the
	// management UI and rabbitmqctl show. Defaults to ConnectionNameDefault.
	ConnectionName string
	// Logger receives connection events: attempts that failed, connection
	// or channel lost, reconnected, broker blocked or unblocked; and the
	// lines amqp091-go logs itself (at warn level, message
	// "amqpsink: amqp091-go"), which it keeps one logger for per process:
	// the last sink built with a Logger receives them. Defaults to
	// discarding them.
	Logger *slog.Logger
	// TLSConfig is used for an amqps:// URL in place of the certfile,
	// keyfile, cacertfile and server_name_indication parameters; it is
	// cloned for each connection, and ServerName defaults to the URL's
	// host. Setting it with an amqp:// URL is an error. Defaults to nil: a
	// config built from those parameters, with the system roots when
	// cacertfile is absent.
	TLSConfig *tls.Config
}

// Sink is an [outbox.Sink] publishing to RabbitMQ. It is safe for
// concurrent use: publishes are spread over a pool of channels and pipelined,
// each waiting only for its own confirm.
type Sink struct {
	cfg       *config
	connName  string
	log       *slog.Logger
	tlsConfig *tls.Config

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	settled    chan struct{} // closed once the first connection attempt has an outcome
	settleOnce sync.Once
	startErr   error // set before settled is closed when that outcome fails New
	closeOnce  sync.Once

	mu      sync.Mutex
	sess    *session
	downErr error // what a publish gets while sess is nil; nil before the first attempt ends
	// connecting: a connection attempt is under way, and a publish waits
	// for its outcome rather than fail with the previous one (a refused
	// handshake can take the broker seconds: failing every publish for
	// that long spent their attempts).
	connecting bool
	changed    chan struct{} // closed and replaced on every change of sess or of a channel
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink for rawURL (see README.md for its form) and starts
// connecting. It waits for the first connection attempt, bounded by
// connection_timeout: a broker that cannot be reached still gives a Sink,
// whose publishes fail as retryable until a background reconnection
// succeeds; refused credentials or vhost access make New fail.
func New(rawURL string, opts *Options) (*Sink, error) {
	cfg, opts, err := sinkutil.Prepare(rawURL, opts, parseURL)
	if err != nil {
		return nil, err
	}
	if opts.TLSConfig != nil && !cfg.tls {
		return nil, errors.New("amqpsink: Options.TLSConfig is set but the URL scheme is amqp://; use amqps://")
	}
	s := &Sink{
		cfg:       cfg,
		connName:  opts.ConnectionName,
		log:       sinkutil.Logger(opts.Logger),
		tlsConfig: opts.TLSConfig,
		settled:   make(chan struct{}),
		changed:   make(chan struct{}),
	}
	if s.connName == "" {
		s.connName = ConnectionNameDefault
	}
	if opts.Logger != nil {
		libraryLog.Use(opts.Logger)
	}

	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.run()
	<-s.settled
	if s.startErr != nil {
		_ = s.Close()
		return nil, s.startErr
	}
	return s, nil
}

// Publish publishes msg and waits for the broker's confirm; see the package
// doc for how outcomes are classified.
func (s *Sink) Publish(ctx context.Context, msg *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return outbox.Retryable(fmt.Errorf("amqpsink: %w", err))
	}
	exchange := s.cfg.exchange.Expand(msg, nil)
	key := s.cfg.routingKey.Expand(msg, nil)
	if len(exchange) > maxShortstr {
		return outbox.Permanent(fmt.Errorf("amqpsink: exchange name %.40q… is %d bytes; AMQP allows at most %d", exchange, len(exchange), maxShortstr))
	}
	if len(key) > maxShortstr {
		return outbox.Permanent(fmt.Errorf("amqpsink: routing key %.40q… is %d bytes; AMQP allows at most %d", key, len(key), maxShortstr))
	}
	id := msg.IDString()

	for {
		ss, downErr, changed := s.state()
		if ss == nil {
			if downErr != nil {
				return downErr
			}
			// The first connection attempt has not ended yet.
			if err := waitChange(ctx, changed); err != nil {
				return err
			}
			continue
		}
		if reason := ss.blocked.Load(); reason != nil {
			return outbox.Retryable(fmt.Errorf("amqpsink: broker blocks publishing: %s", *reason))
		}
		pc, busy := ss.pick(id)
		if pc == nil {
			if busy {
				return outbox.Retryable(errors.New("amqpsink: an earlier publish of this message still awaits its confirm"))
			}
			// Every channel is being reopened.
			if err := waitChange(ctx, changed); err != nil {
				return err
			}
			continue
		}
		return s.publishOn(ctx, pc, msg, id, exchange, key)
	}
}

func (s *Sink) publishOn(ctx context.Context, pc *pchan, msg *outbox.Message, id, exchange, key string) error {
	headers := amqp.Table{}
	for _, h := range reservedHeaders.Headers(msg) {
		headers[h.Key] = h.Value
	}
	pub := amqp.Publishing{
		Headers:      headers,
		ContentType:  "application/json",
		DeliveryMode: amqp.Transient,
		MessageId:    id,
		Timestamp:    msg.CreatedAt,
		Body:         msg.Payload,
	}
	if s.cfg.persistent {
		pub.DeliveryMode = amqp.Persistent
	}
	if len(msg.EventType) <= maxShortstr {
		pub.Type = msg.EventType
	}
	w := &waiter{id: id, exchange: exchange, key: key, size: len(msg.Payload), done: make(chan error, 1)}

	// The library writes to the socket without a context, and the write
	// blocks for as long as the broker stops reading (it does under a
	// memory or disk alarm), holding the channel's lock. The write runs on
	// its own goroutine so that Publish can still return when ctx ends;
	// the goroutine ends with the write, or when the connection is closed.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, s.cfg.mandatory, false, pub)
		switch {
		case err != nil:
			pc.release(id)
			w.done <- outbox.Retryable(fmt.Errorf("amqpsink: publish: %w", err))
		case dc == nil:
			// Only a channel outside confirm mode gives no confirmation,
			// and every channel is put in confirm mode before it is used.
			pc.release(id)
			w.done <- outbox.Retryable(errors.New("amqpsink: channel not in confirm mode"))
		default:
			if err, now := pc.register(dc.DeliveryTag, w); now {
				w.done <- err
			}
		}
	}()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return outbox.Retryable(fmt.Errorf("amqpsink: no confirm from the broker yet: %w", ctx.Err()))
	}
}

func waitChange(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-changed:
		return nil
	case <-ctx.Done():
		return outbox.Retryable(fmt.Errorf("amqpsink: waiting for a connection: %w", ctx.Err()))
	}
}

// Close closes the connection (waiting at most connection_timeout for the
// broker to answer) and stops reconnecting; every goroutine of the sink has
// ended when it returns. It is safe to call more than once.
func (s *Sink) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

// libraryLog receives amqp091-go's own log lines (a channel closed
// unexpectedly, a reply it could not send). It is installed before any
// connection exists, since amqp091-go reads its logger without locking;
// until a sink has a Logger it discards, as amqp091-go's default does.
var libraryLog = sinkutil.NewLibraryLog("amqpsink: amqp091-go", slog.LevelWarn)

func init() { amqp.SetLogger(libraryLog) }
