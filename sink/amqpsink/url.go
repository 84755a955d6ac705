package amqpsink

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
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
var passThrough = map[string]bool{
	"auth_mechanism":         true,
	"cacertfile":             true,
	"certfile":               true,
	"keyfile":                true,
	"server_name_indication": true,
}

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
func CheckURL(rawURL string) error {
	_, err := parseURL(rawURL)
	return err
}

// parseURL turns rawURL into a config. Every error names the offending
// part, prefixed with "amqpsink: ", and never quotes the password.
func parseURL(rawURL string) (*config, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: malformed URL: %s", sinkutil.Scrub(sinkutil.ParseErrText(err), rawURL))
	}
	switch u.Scheme {
	case "amqp", "amqps":
	case "":
		return nil, errors.New("amqpsink: URL has no scheme; want amqp://user:pass@host:port/vhost?exchange=NAME&routing_key=KEY")
	default:
		return nil, fmt.Errorf("amqpsink: unsupported URL scheme %q; want amqp or amqps", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("amqpsink: URL has no host; want %s://user:pass@host:port/vhost", u.Scheme)
	}
	if u.Fragment != "" || strings.Contains(rawURL, "#") {
		// Even a bare trailing "#" would silently cut what follows it.
		return nil, errors.New("amqpsink: URL must not contain a raw '#' (it starts a fragment that would be dropped); write %23")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: malformed URL query: %s", sinkutil.Scrub(err.Error(), rawURL))
	}

	c := &config{
		channels:   ChannelsDefault,
		connTO:     ConnectionTimeoutDefault,
		mandatory:  true,
		persistent: true,
		reconnMax:  ReconnectMaxDefault,
		tls:        u.Scheme == "amqps",
	}
	exchange, routingKey := "", RoutingKeyDefault
	keep := url.Values{}
	for key, vals := range q {
		if len(vals) != 1 && key != "auth_mechanism" {
			return nil, fmt.Errorf("amqpsink: query parameter %s given %d times; give it once", key, len(vals))
		}
		v := vals[0]
		switch key {
		case "exchange":
			exchange = v
		case "routing_key":
			routingKey = v
		case "mandatory":
			c.mandatory, err = parseBool(key, v)
		case "persistent":
			c.persistent, err = parseBool(key, v)
		case "channels":
			c.channels, err = strconv.Atoi(v)
			if err != nil || c.channels < 1 || c.channels > MaxChannels {
				err = fmt.Errorf("amqpsink: channels must be an integer from 1 to %d, got %q", MaxChannels, v)
			}
		case "connection_timeout":
			// Milliseconds, as in RabbitMQ's URI spec.
			ms, perr := strconv.ParseInt(v, 10, 64)
			if perr != nil || ms <= 0 || ms > int64(time.Hour/time.Millisecond) {
				err = fmt.Errorf("amqpsink: connection_timeout must be a positive number of milliseconds (at most one hour), got %q", v)
			}
			c.connTO = time.Duration(ms) * time.Millisecond
		case "heartbeat":
			// Seconds, as in RabbitMQ's URI spec. Zero would not disable
			// heartbeats (the client then takes the server's interval) and
			// a dead peer goes unnoticed without them, so it is refused.
			sec, perr := strconv.Atoi(v)
			if perr != nil || sec < 1 || sec > 65535 {
				err = fmt.Errorf("amqpsink: heartbeat must be a whole number of seconds from 1 to 65535, got %q", v)
			}
			keep[key] = vals
		case "reconnect_max":
			c.reconnMax, err = time.ParseDuration(v)
			if err != nil || c.reconnMax < ReconnectMin {
				err = fmt.Errorf("amqpsink: reconnect_max must be a duration of at least %s (e.g. 5s), got %q", ReconnectMin, v)
			}
		default:
			if !passThrough[key] {
				return nil, fmt.Errorf("amqpsink: unknown query parameter %q (want exchange, routing_key, mandatory, persistent, channels, connection_timeout, reconnect_max, heartbeat, auth_mechanism, certfile, keyfile, cacertfile, server_name_indication)", key)
			}
			keep[key] = vals
		}
		if err != nil {
			return nil, err
		}
	}

	if c.exchange, err = parseName("exchange", exchange); err != nil {
		return nil, err
	}
	if routingKey == "" && exchange == "" {
		return nil, errors.New("amqpsink: routing_key must not be empty with the default exchange: it names the queue")
	}
	if c.routingKey, err = parseName("routing_key", routingKey); err != nil {
		return nil, err
	}

	dial := *u
	dial.RawQuery = keep.Encode()
	c.dialURL = dial.String()
	parsed, err := amqp.ParseURI(c.dialURL)
	if err != nil {
		return nil, fmt.Errorf("amqpsink: invalid AMQP URI: %s", sinkutil.Scrub(err.Error(), rawURL))
	}
	c.vhost = parsed.Vhost
	shown := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	if u.User != nil {
		// A lone user part may be a token; beside a password it is a name.
		shown.User = url.User(sinkutil.Redacted)
		if _, ok := u.User.Password(); ok {
			shown.User = url.User(u.User.Username())
		}
	}
	c.display = shown.String()
	return c, nil
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

func parseBool(key, v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("amqpsink: %s must be true or false, got %q", key, v)
	}
	return b, nil
}
