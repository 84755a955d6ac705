package amqpsink

import "time"

// Exported for the black-box tests in amqpsink_test.
var (
	ClassifyClose = classifyClose
	IsConfigError = isConfigError
)

// Parsed is what the tests see of a parsed URL.
type Parsed struct {
	DialURL, Display, Vhost, Exchange, RoutingKey string
	TLS, Mandatory, Persistent                    bool
	Channels                                      int
	ConnectionTimeout, ReconnectMax               time.Duration
}

func ParseURL(raw string) (Parsed, error) {
	c, err := parseURL(raw)
	if err != nil {
		return Parsed{}, err
	}
	return Parsed{
		DialURL: c.dialURL, Display: c.display, Vhost: c.vhost,
		Exchange: c.exchange.String(), RoutingKey: c.routingKey.String(),
		TLS: c.tls, Mandatory: c.mandatory, Persistent: c.persistent,
		Channels: c.channels, ConnectionTimeout: c.connTO, ReconnectMax: c.reconnMax,
	}, nil
}
