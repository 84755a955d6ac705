package redissink

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// query declares the URL's parameters.
var query = sinkutil.QuerySpec{Known: []string{
	"idmp", "maxlen", "pipeline", "pool_size", "producer", "stream", "timeout",
}}

// The sink has no reserved-header set: an entry's fields are fixed names and
// a message's own headers travel inside the one "headers" field, where they
// cannot replace a field the sink writes.

// form is the URL's shape.
var form = sinkutil.URLForm{Pkg: "redissink", Schemes: []string{"redis", "rediss"}, Rest: "host:port"}

// config is a parsed sink URL.
type config struct {
	u        *url.URL
	addr     string
	db       int
	idmp     string
	maxLen   int64
	pipeline bool
	poolSize int
	producer string
	stream   *sinkutil.Template
	timeout  time.Duration
}

// CheckURL reports whether rawURL is a valid sink URL, without connecting
// anywhere (for configuration checks). The error is the one [New] would
// return.
func CheckURL(rawURL string) error { return sinkutil.ParseError(rawURL, parseURL) }

// parseURL reads rawURL: its form, scheme, host, port and database, then
// its query. Every error is prefixed "redissink: " and never quotes the
// password.
func parseURL(rawURL string) (*config, error) {
	if err := form.NoFragment(rawURL); err != nil {
		return nil, err
	}
	u, err := form.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	port := u.Port()
	if port == "" {
		port = "6379"
	} else if !sinkutil.ValidPort(port) {
		return nil, fmt.Errorf("redissink: invalid port %q", port)
	}
	c := &config{u: u, addr: net.JoinHostPort(u.Hostname(), port)}
	if p := strings.Trim(u.Path, "/"); p != "" {
		c.db, err = strconv.Atoi(p)
		if err != nil || c.db < 0 {
			return nil, fmt.Errorf("redissink: invalid database %q in URL path; want a number such as /0", p)
		}
	}
	if err := query.Read(u.RawQuery, rawURL, c.parseQuery); err != nil {
		return nil, fmt.Errorf("redissink: %w", err)
	}
	return c, nil
}

func (c *config) parseQuery(q sinkutil.Query) error {
	streamText, err := q.NonEmpty("stream", StreamDefault)
	if err != nil {
		return err
	}
	if c.stream, err = sinkutil.ParseTemplate(streamText); err != nil {
		return fmt.Errorf("stream=%q: %w", streamText, err)
	}
	// 0 disables trimming.
	maxLen, err := q.Int("maxlen", 0, 0, 0)
	if err != nil {
		return err
	}
	c.maxLen = int64(maxLen)
	if c.idmp, err = q.OneOf("idmp", IDMPAuto, IDMPAuto, IDMPOn, IDMPOff); err != nil {
		return err
	}
	if c.producer, err = q.NonEmpty("producer", ProducerDefault); err != nil {
		return err
	}
	if c.poolSize, err = q.Int("pool_size", PoolSizeDefault, 1, 0); err != nil {
		return err
	}
	if c.pipeline, err = q.Bool("pipeline", false); err != nil {
		return err
	}
	c.timeout, err = q.Duration("timeout", TimeoutDefault, sinkutil.Positive, 0)
	return err
}
