package kafkasink

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// config is what a sink URL says, validated.
type config struct {
	clientID     string
	createTopics bool
	linger       time.Duration
	maxBuffered  int
	password     string
	sasl         string // "" (none), "plain", "scram-sha-256" or "scram-sha-512"
	seeds        []string
	timeout      time.Duration
	tls          bool
	topic        *sinkutil.Template
	user         string
}

// reservedHeaders are the record headers the sink writes itself: a
// message's own headers never replace them.
var reservedHeaders = sinkutil.Reserved{}

// query declares the URL's parameters.
var query = sinkutil.QuerySpec{Known: []string{
	"acks", "client_id", "create_topics", "linger", "max_buffered", "sasl", "timeout", "tls", "topic",
}}

// CheckURL reports whether rawURL is a valid sink URL, without contacting
// any broker (for configuration checks). The error is the one [New] would
// return.
func CheckURL(rawURL string) error { return sinkutil.ParseError(rawURL, parse) }

// parse is parseURL with the package prefix on its errors, as New and
// Check report them.
func parse(rawURL string) (*config, error) {
	c, err := parseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("kafkasink: %w", err)
	}
	return c, nil
}

// parseURL reads rawURL. net/url cannot be used for the authority: it
// rejects a list of brokers whose second entry is a bracketed IPv6 address.
// Errors never quote the userinfo, which may hold a password.
func parseURL(rawURL string) (*config, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, errors.New("URL has no scheme; want kafka://host:port[,host:port...]?topic=NAME")
	}
	if !strings.EqualFold(scheme, "kafka") {
		return nil, fmt.Errorf("unsupported URL scheme %q; want kafka", scheme)
	}
	if strings.Contains(rest, "#") {
		return nil, errors.New("URL must not have a fragment (#...)")
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	path, rawQuery, _ := strings.Cut(tail, "?")
	if path != "" && path != "/" {
		return nil, errors.New("URL must not have a path; name the topic with ?topic=NAME")
	}
	c := &config{}
	if err := c.parseAuthority(authority); err != nil {
		return nil, err
	}
	if err := query.Read(rawQuery, rawURL, c.parseQuery); err != nil {
		return nil, err
	}
	switch {
	case c.sasl != "" && c.user == "":
		return nil, fmt.Errorf("sasl=%s needs credentials: kafka://user:password@host:port", c.sasl)
	case c.sasl == "" && c.user != "":
		return nil, errors.New("URL has credentials but no SASL mechanism; add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512")
	}
	return c, nil
}

func (c *config) parseQuery(q sinkutil.Query) error {
	if acks := q.String("acks", "all"); acks != "all" && acks != "-1" {
		return fmt.Errorf("acks=%s is not supported: the sink always waits for all in-sync replicas (acks=all)", acks)
	}
	c.sasl = strings.ToLower(q.String("sasl", ""))
	switch c.sasl {
	case "", "plain", "scram-sha-256", "scram-sha-512":
	default:
		return fmt.Errorf("sasl=%s is not supported; want plain, scram-sha-256 or scram-sha-512", q.String("sasl", ""))
	}
	var err error
	if c.clientID, err = q.NonEmpty("client_id", ClientIDDefault); err != nil {
		return err
	}
	if c.createTopics, err = q.Bool("create_topics", false); err != nil {
		return err
	}
	if c.tls, err = q.Bool("tls", false); err != nil {
		return err
	}
	if c.linger, err = q.Duration("linger", LingerDefault, 0, 0); err != nil {
		return err
	}
	// franz-go's lower bound for a record's delivery timeout.
	if c.timeout, err = q.Duration("timeout", TimeoutDefault, time.Second, 0); err != nil {
		return err
	}
	if c.maxBuffered, err = q.Int("max_buffered", MaxBufferedDefault, 1, 0); err != nil {
		return err
	}
	c.topic, err = parseTopic(q.String("topic", TopicDefault))
	return err
}

// maxTopicLen is Kafka's limit on a topic name's length.
const maxTopicLen = 249

// parseTopic parses the topic template and checks its literal parts, so a
// name Kafka refuses is caught at start-up rather than on every message.
func parseTopic(s string) (*sinkutil.Template, error) {
	t, err := sinkutil.ParseTemplate(s)
	if err != nil {
		return nil, fmt.Errorf("topic: %w", err)
	}
	// Expanding with one-letter values leaves the literals to judge: the
	// placeholders' own characters are sanitised per message.
	probe := t.Expand(&probeMessage, nil)
	if i := strings.IndexFunc(probe, func(r rune) bool { return !legalTopicRune(r) }); i >= 0 {
		return nil, fmt.Errorf("topic %q: character %q is not allowed in a Kafka topic name (allowed: a-z A-Z 0-9 . _ -)", s, []rune(probe[i:])[0])
	}
	shortest := t.Expand(&emptyMessage, nil)
	if len(shortest) > maxTopicLen {
		return nil, fmt.Errorf("topic %q: topic name longer than %d characters even with empty placeholders", s, maxTopicLen)
	}
	if t.Fixed() {
		if err := checkTopic(shortest); err != nil {
			return nil, fmt.Errorf("topic %q: %w", s, err)
		}
	}
	return t, nil
}
