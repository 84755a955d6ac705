package amqpsink

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Defaults for the URL's query parameters.
const (
	// ChannelsDefault is how many AMQP channels a connection publishes on.
	ChannelsDefault = 4
	// ConnectionTimeoutDefault bounds one connection attempt: TCP, TLS, the
	// AMQP handshake and opening the channels.
	ConnectionTimeoutDefault = 10 * time.Second
	// ReconnectMaxDefault caps the delay between reconnection attempts.
	ReconnectMaxDefault = 5 * time.Second
	// RoutingKeyDefault is the routing key template when the URL has none.
	RoutingKeyDefault = "outbox.{aggregate_type}.{event_type}"
	// MaxChannels is the largest accepted value of the channels parameter.
	MaxChannels = 64
	// ReconnectMin is the first delay between reconnection attempts; it
	// doubles on each failure up to reconnect_max.
	ReconnectMin = 100 * time.Millisecond
)

// maxShortstr is the AMQP limit on exchange names, routing keys and other
// short strings. The client library turns a longer one into a frame write
// error that tears the whole connection down, so the sink checks first.
const maxShortstr = 255

// passThrough are the RabbitMQ URI query parameters handed to the client
// library unchanged (https://www.rabbitmq.com/docs/uri-query-parameters).
var passThrough = []string{"auth_mechanism", "cacertfile", "certfile", "heartbeat", "keyfile", "server_name_indication"}

// query declares the URL's parameters: the sink's own and the pass-through
// ones.
var query = sinkutil.QuerySpec{
	Known: append([]string{
		"channels", "connection_timeout", "exchange", "mandatory", "persistent", "reconnect_max", "routing_key",
	}, passThrough...),
	Repeatable: []string{"auth_mechanism"},
}

// reservedHeaders are the message headers the sink writes itself: a
// message's own headers never replace them.
var reservedHeaders = sinkutil.Reserved{}

// form is the URL's shape.
var form = sinkutil.URLForm{Pkg: "amqpsink", Schemes: []string{"amqp", "amqps"}, Rest: "user:pass@host:port/vhost"}

// config is a parsed sink URL.
type config struct {
	// dialURL is what the client library dials: the URL minus the sink's
	// own parameters. It holds the password; it never goes into an error.
	dialURL string
	// display names the broker in errors and logs: no password, no query.
	display string
	tls     bool
	vhost   string

	channels   int
	connTO     time.Duration
	exchange   *sinkutil.Template
	mandatory  bool
	persistent bool
	reconnMax  time.Duration
	routingKey *sinkutil.Template
}

// CheckURL reports whether rawURL is a valid sink URL, without connecting
// anywhere (for configuration checks). The error is the one [New] would
// return.
func CheckURL(rawURL string) error { return sinkutil.ParseError(rawURL, parseURL) }

// parseURL turns rawURL into a config. Every error names the offending
// part, prefixed with "amqpsink: ", and never quotes the password.
func parseURL(rawURL string) (*config, error) {
	u, err := parseBase(rawURL)
	if err != nil {
		return nil, err
	}
	q, err := query.Parse(u.RawQuery, rawURL)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: %w", err)
	}
	c := &config{tls: u.Scheme == "amqps"}
	if err := c.parseQuery(q); err != nil {
		return nil, err
	}
	dial := *u
	dial.RawQuery = q.Values(passThrough...).Encode()
	c.dialURL = dial.String()
	parsed, err := amqp.ParseURI(c.dialURL)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: invalid AMQP URI: %s", sinkutil.Scrub(err.Error(), rawURL))
	}
	c.vhost = parsed.Vhost
	c.display = display(u)
	return c, nil
}

// parseBase parses rawURL and checks its scheme, host and fragment.
func parseBase(rawURL string) (*url.URL, error) {
	u, err := form.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return u, form.NoFragment(rawURL)
}

// parseQuery reads the sink's own parameters.
func (c *config) parseQuery(q sinkutil.Query) error {
	if err := c.parseSettings(q); err != nil {
		return fmt.Errorf("amqpsink: %w", err)
	}
	exchange := q.String("exchange", "")
	routingKey := q.String("routing_key", RoutingKeyDefault)
	var err error
	if c.exchange, err = parseName("exchange", exchange); err != nil {
		return err
	}
	if routingKey == "" && exchange == "" {
		return errors.New("amqpsink: routing_key must not be empty with the default exchange: it names the queue")
	}
	c.routingKey, err = parseName("routing_key", routingKey)
	return err
}

func (c *config) parseSettings(q sinkutil.Query) error {
	var err error
	if c.mandatory, err = q.Bool("mandatory", true); err != nil {
		return err
	}
	if c.persistent, err = q.Bool("persistent", true); err != nil {
		return err
	}
	if c.channels, err = q.Int("channels", ChannelsDefault, 1, MaxChannels); err != nil {
		return err
	}
	// Milliseconds, as in RabbitMQ's URI spec.
	ms, err := q.IntOf("connection_timeout", "milliseconds", int(ConnectionTimeoutDefault/time.Millisecond), 1, int(time.Hour/time.Millisecond))
	if err != nil {
		return err
	}
	c.connTO = time.Duration(ms) * time.Millisecond
	// Seconds, as in RabbitMQ's URI spec; handed on to the client library.
	// Zero would not disable heartbeats (the client then takes the
	// server's interval) and a dead peer goes unnoticed without them, so it
	// is refused.
	if _, err = q.IntOf("heartbeat", "seconds", 0, 1, 65535); err != nil {
		return err
	}
	c.reconnMax, err = q.Duration("reconnect_max", ReconnectMaxDefault, ReconnectMin, 0)
	return err
}

// display names the broker in errors and logs: no password, no query.
func display(u *url.URL) string {
	shown := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	if u.User != nil {
		// A lone user part may be a token; beside a password it is a name.
		shown.User = url.User(sinkutil.Redacted)
		if _, ok := u.User.Password(); ok {
			shown.User = url.User(u.User.Username())
		}
	}
	return shown.String()
}

// parseName parses an exchange or routing key template; a name without
// placeholders is checked against the AMQP length limit here, once.
func parseName(param, s string) (*sinkutil.Template, error) {
	t, err := sinkutil.ParseTemplate(s)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: %s: %w", param, err)
	}
	if t.Fixed() && len(s) > maxShortstr {
		return nil, fmt.Errorf("amqpsink: %s is %d bytes; AMQP allows at most %d", param, len(s), maxShortstr)
	}
	return t, nil
}
