package mqttsink

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// query declares the URL's parameters.
var query = sinkutil.QuerySpec{Known: []string{"client_id", "connect_timeout", "keepalive", "topic"}}

// form is the URL's shape.
var form = sinkutil.URLForm{Pkg: "mqttsink", Schemes: []string{"mqtt", "mqtts"}, Rest: "host:port"}

// reservedHeaders are the user properties the sink writes itself: a
// message's own headers never replace them.
var reservedHeaders = sinkutil.Reserved{}

// maxKeepAlive is the largest keep-alive MQTT can express (16 bits of
// seconds).
const maxKeepAlive = 65535 * time.Second

// CheckURL reports whether rawURL is a valid sink URL, without connecting
// anywhere (for configuration checks). The error is the one [New] would
// return.
func CheckURL(rawURL string) error { return sinkutil.ParseError(rawURL, parseURL) }

// urlConfig is what a sink URL says.
type urlConfig struct {
	u                         *url.URL
	host, port                string
	topic                     *sinkutil.Template
	clientID                  string
	keepAlive, connectTimeout time.Duration
}

// parseURL reads rawURL: its form, scheme, host, port and path, then its
// query. Every error is prefixed "mqttsink: " and never quotes the
// password.
func parseURL(rawURL string) (*urlConfig, error) {
	// A raw "#" would start the URL's fragment and "+" in a query means a
	// space: both would silently change the topic, so both must be
	// percent-encoded (%23, %2B) to be meant literally.
	if strings.Contains(rawURL, "#") {
		return nil, errors.New("mqttsink: a raw '#' in the URL starts a fragment and would be dropped; write %23 if you mean it (MQTT wildcards cannot be published to anyway)")
	}
	u, err := form.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	if strings.Contains(u.RawQuery, "+") {
		return nil, errors.New("mqttsink: a raw '+' in the query (topic=...) means a space; write %20 for a space or %2B for a plus (MQTT wildcards cannot be published to anyway)")
	}
	c := &urlConfig{u: u, host: u.Hostname()}
	c.port = "1883"
	if u.Scheme == "mqtts" {
		c.port = "8883"
	}
	if p := u.Port(); p != "" {
		if !sinkutil.ValidPort(p) {
			return nil, fmt.Errorf("mqttsink: invalid port %q", p)
		}
		c.port = p
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("mqttsink: unexpected path %q in URL; the topic goes in ?topic=", u.Path)
	}
	if err := query.Read(u.RawQuery, rawURL, c.parseQuery); err != nil {
		return nil, fmt.Errorf("mqttsink: %w", err)
	}
	return c, nil
}

func (c *urlConfig) parseQuery(q sinkutil.Query) error {
	if q.Has("client_id") {
		v := q.String("client_id", "")
		if v == "" || !validUTF8(v) || len(v) > 65535 {
			return fmt.Errorf("client_id must be a non-empty UTF-8 string, got %q", v)
		}
		c.clientID = v
	}
	var err error
	if c.keepAlive, err = q.Duration("keepalive", KeepAliveDefault, 0, maxKeepAlive); err != nil {
		return err
	}
	if c.connectTimeout, err = q.Duration("connect_timeout", ConnectTimeoutDefault, sinkutil.Positive, 0); err != nil {
		return err
	}
	topicText := q.String("topic", TopicDefault)
	if c.topic, err = parseTopic(topicText); err != nil {
		return fmt.Errorf("topic=%q: %w", topicText, err)
	}
	return nil
}

// parseTopic parses a topic template and checks its literal parts: the
// placeholders' values are sanitised per message, the literals must be
// right as written.
func parseTopic(text string) (*sinkutil.Template, error) {
	if text == "" {
		return nil, errors.New("must not be empty")
	}
	tpl, err := sinkutil.ParseTemplate(text)
	if err != nil {
		return nil, err
	}
	if strings.ContainsAny(text, "+#\x00") {
		return nil, errors.New("a topic name cannot contain the wildcards + or # or NUL")
	}
	if strings.HasPrefix(text, "$") {
		return nil, errors.New("topics starting with $ are reserved for the broker")
	}
	if !utf8.ValidString(text) {
		return nil, errors.New("not valid UTF-8")
	}
	return tpl, nil
}
