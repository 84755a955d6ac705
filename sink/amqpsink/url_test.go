package amqpsink_test

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/amqpsink"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	defaults := amqpsink.Parsed{
		Vhost:             "/",
		Exchange:          "",
		RoutingKey:        amqpsink.RoutingKeyDefault,
		Mandatory:         true,
		Persistent:        true,
		Channels:          amqpsink.ChannelsDefault,
		ConnectionTimeout: amqpsink.ConnectionTimeoutDefault,
		ReconnectMax:      amqpsink.ReconnectMaxDefault,
	}
	with := func(f func(p *amqpsink.Parsed)) amqpsink.Parsed {
		p := defaults
		f(&p)
		return p
	}
	for _, tt := range []struct {
		name, url string
		want      amqpsink.Parsed
	}{
		{"Defaults", "amqp://guest:guest@127.0.0.1:5672/", with(func(p *amqpsink.Parsed) {
			p.DialURL = "amqp://guest:guest@127.0.0.1:5672/"
			p.Display = "amqp://guest@127.0.0.1:5672/"
		})},
		{"NoPathIsDefaultVhost", "amqp://u:p@rabbit", with(func(p *amqpsink.Parsed) {
			p.DialURL = "amqp://u:p@rabbit"
			p.Display = "amqp://u@rabbit"
		})},
		{"EncodedSlashVhost", "amqp://u:p@rabbit/%2F", with(func(p *amqpsink.Parsed) {
			p.DialURL = "amqp://u:p@rabbit/%2F"
			p.Display = "amqp://u@rabbit/%2F"
		})},
		{"NamedVhostAndAllOptions", "amqp://u:p%40ss@rabbit:5673/prod?exchange=events.{aggregate_type}&routing_key={event_type}.{aggregate_id}" +
			"&mandatory=false&persistent=0&channels=8&connection_timeout=2500&reconnect_max=30s&heartbeat=5", with(func(p *amqpsink.Parsed) {
			p.DialURL = "amqp://u:p%40ss@rabbit:5673/prod?heartbeat=5"
			p.Display = "amqp://u@rabbit:5673/prod"
			p.Vhost = "prod"
			p.Exchange = "events.{aggregate_type}"
			p.RoutingKey = "{event_type}.{aggregate_id}"
			p.Mandatory = false
			p.Persistent = false
			p.Channels = 8
			p.ConnectionTimeout = 2500 * time.Millisecond
			p.ReconnectMax = 30 * time.Second
		})},
		{"DefaultExchangeToQueue", "amqp://h/?exchange=&routing_key=jobs", with(func(p *amqpsink.Parsed) {
			p.DialURL = "amqp://h/"
			p.Display = "amqp://h/"
			p.RoutingKey = "jobs"
		})},
		{"FanoutWithEmptyKey", "amqp://h/?exchange=fan&routing_key=", with(func(p *amqpsink.Parsed) {
			p.DialURL = "amqp://h/"
			p.Display = "amqp://h/"
			p.Exchange = "fan"
			p.RoutingKey = ""
		})},
		{"TLSWithPassThrough", "amqps://u:p@rabbit/?cacertfile=/etc/ca.pem&server_name_indication=rabbit.internal&auth_mechanism=plain", with(func(p *amqpsink.Parsed) {
			p.DialURL = "amqps://u:p@rabbit/?auth_mechanism=plain&cacertfile=%2Fetc%2Fca.pem&server_name_indication=rabbit.internal"
			p.Display = "amqps://u@rabbit/"
			p.TLS = true
		})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := amqpsink.ParseURL(tt.url)
			require.NoError(t, err)
			require.NoError(t, amqpsink.CheckURL(tt.url))
			require.Equal(t, tt.want, got)
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, url, want string }{
		{"Empty", "", "no scheme"},
		{"NoScheme", "rabbit:5672", "unsupported URL scheme"},
		{"WrongScheme", "http://u:hunter2@rabbit/", `unsupported URL scheme "http"`},
		{"NoHost", "amqp:///vhost", "no host"},
		{"BadPort", "amqp://u:hunter2@rabbit:port/", "malformed URL"},
		{"BadEscapeInPassword", "amqp://u:hunter2%zz@rabbit/", "malformed URL"},
		{"Fragment", "amqp://u:hunter2@rabbit/#x", "fragment"},
		{"UnknownParam", "amqp://u:hunter2@rabbit/?exchnage=x", `unknown URL parameter "exchnage" (known: auth_mechanism, cacertfile, certfile, channels, connection_timeout, exchange, heartbeat, keyfile, mandatory, persistent, reconnect_max, routing_key, server_name_indication)`},
		{"RepeatedParam", "amqp://u:hunter2@rabbit/?exchange=a&exchange=b", "URL parameter exchange given 2 times; give it once"},
		{"BadMandatory", "amqp://u:hunter2@rabbit/?mandatory=yes", "mandatory must be true or false"},
		{"BadPersistent", "amqp://u:hunter2@rabbit/?persistent=2", "persistent must be true or false"},
		{"ZeroChannels", "amqp://u:hunter2@rabbit/?channels=0", "channels must be an integer from 1 to 64"},
		{"TooManyChannels", "amqp://u:hunter2@rabbit/?channels=65", "channels must be an integer from 1 to 64"},
		{"BadConnectionTimeout", "amqp://u:hunter2@rabbit/?connection_timeout=10s", "connection_timeout must be a whole number of milliseconds from 1 to 3600000"},
		{"ZeroConnectionTimeout", "amqp://u:hunter2@rabbit/?connection_timeout=0", "connection_timeout must be a whole number of milliseconds"},
		{"BadReconnectMax", "amqp://u:hunter2@rabbit/?reconnect_max=5", `reconnect_max must be a duration of at least 100ms (such as 5s), got "5"`},
		{"TinyReconnectMax", "amqp://u:hunter2@rabbit/?reconnect_max=1ms", "reconnect_max must be a duration of at least 100ms"},
		{"UnknownPlaceholder", "amqp://u:hunter2@rabbit/?routing_key={aggregate}", "routing_key: unknown placeholder {aggregate}"},
		{"UnclosedPlaceholder", "amqp://u:hunter2@rabbit/?exchange=ex.{event_type", "exchange: unclosed placeholder"},
		{"EmptyKeyOnDefaultExchange", "amqp://u:hunter2@rabbit/?routing_key=", "routing_key must not be empty with the default exchange"},
		{"LongFixedExchange", "amqp://u:hunter2@rabbit/?exchange=" + strings.Repeat("e", 256), "exchange is 256 bytes"},
		{"LongFixedRoutingKey", "amqp://u:hunter2@rabbit/?routing_key=" + strings.Repeat("k", 256), "routing_key is 256 bytes"},
		{"BadHeartbeat", "amqp://u:hunter2@rabbit/?heartbeat=soon", "heartbeat must be a whole number of seconds from 1 to 65535"},
		{"ZeroHeartbeat", "amqp://u:hunter2@rabbit/?heartbeat=0", "heartbeat must be a whole number of seconds"},
		{"BadQuery", "amqp://u:hunter2@rabbit/?a=%zz", "malformed URL query"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := amqpsink.ParseURL(tt.url)
			require.ErrorContains(t, err, tt.want)
			require.True(t, strings.HasPrefix(err.Error(), "amqpsink: "), "error %q lacks the package prefix", err)
			require.NotContains(t, err.Error(), "hunter2", "error leaks the password")
			// New and CheckURL report exactly the same error, without dialling.
			_, newErr := amqpsink.New(tt.url, nil)
			require.EqualError(t, newErr, err.Error())
			require.EqualError(t, amqpsink.CheckURL(tt.url), err.Error())
		})
	}
}

func TestClassifyClose(t *testing.T) {
	t.Parallel()
	broker := func(code int, reason string) *amqp.Error {
		return &amqp.Error{Code: code, Reason: reason, Server: true}
	}
	for _, tt := range []struct {
		name     string
		err      *amqp.Error
		exchange string
		size     int
		want     string
	}{
		{"OwnClose", nil, "x", 10, "retryable"},
		{"MissingExchangeOfThisMessage", broker(404, "NOT_FOUND - no exchange 'events' in vhost '/'"), "events", 10, "permanent"},
		{"MissingExchangeOfAnotherMessage", broker(404, "NOT_FOUND - no exchange 'other' in vhost '/'"), "events", 10, "retryable"},
		{"PrefixOfAnotherExchange", broker(404, "NOT_FOUND - no exchange 'events.x' in vhost '/'"), "events", 10, "retryable"},
		{"WriteRefused", broker(403, "ACCESS_REFUSED - write access to exchange 'events' in vhost '/' refused for user 'app'"), "events", 10, "unavailable"},
		{"WriteRefusedOnDefaultExchange", broker(403, "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for user 'app'"), "", 10, "unavailable"},
		{"TooLarge", broker(406, "PRECONDITION_FAILED - message size 200 is larger than configured max size 100"), "x", 200, "permanent"},
		{"SmallMessageOnChannelKilledByLargeOne", broker(406, "PRECONDITION_FAILED - message size 200 is larger than configured max size 100"), "x", 50, "retryable"},
		{"OtherPrecondition", broker(406, "PRECONDITION_FAILED - unknown delivery tag 7"), "x", 500, "retryable"},
		{"ConnectionForced", broker(320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"), "x", 10, "retryable"},
		{"SocketGone", &amqp.Error{Code: amqp.FrameError, Reason: "read tcp: connection reset by peer"}, "x", 10, "retryable"},
		{"InternalError", broker(541, "INTERNAL_ERROR"), "x", 10, "retryable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := amqpsink.ClassifyClose(tt.err, tt.exchange, tt.size)
			require.Equal(t, tt.want == "permanent", outbox.IsPermanent(err), "want %s, got %v", tt.want, err)
			require.Equal(t, tt.want == "unavailable", outbox.IsUnavailable(err), "want %s, got %v", tt.want, err)
			require.Equal(t, tt.want == "retryable", outbox.IsRetryable(err), "want %s, got %v", tt.want, err)
			if tt.err != nil {
				var ae *amqp.Error
				require.ErrorAs(t, err, &ae, "the broker's error stays inspectable")
			}
		})
	}
}

func TestIsConfigError(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"Credentials", amqp.ErrCredentials, true},
		{"SASL", amqp.ErrSASL, true},
		{"VhostAccess", amqp.ErrVhost, true},
		{"VhostNotFound", &amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED - vhost nope not found", Server: true}, true},
		{"ConnectionLimit", &amqp.Error{Code: amqp.NotAllowed, Reason: "NOT_ALLOWED - connection limit (10) is reached", Server: true}, false},
		{"UnknownCA", fmt.Errorf("tls: %w", x509.UnknownAuthorityError{}), true},
		{"WrongHost", x509.HostnameError{Host: "rabbit"}, true},
		{"Refused", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{"Forced", &amqp.Error{Code: amqp.ConnectionForced, Reason: "shutdown", Server: true}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, amqpsink.IsConfigError(tt.err))
		})
	}
}
