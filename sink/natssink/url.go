package natssink

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// config is a parsed sink URL.
type config struct {
	connectTimeout time.Duration
	creds          string
	dupWindow      time.Duration
	maxPending     int
	name           string
	password       string
	reconnectWait  time.Duration
	// servers are the broker URLs handed to the client, without userinfo:
	// they also name the broker in errors and logs.
	servers       []string
	stream        string
	streamSubject string
	subject       *sinkutil.Template
	timeout       time.Duration
	tls           bool
	token         string
	user          string
}

// query declares the URL's parameters.
var query = sinkutil.QuerySpec{Known: []string{
	"connect_timeout", "create_stream", "creds", "duplicate_window", "max_pending",
	"name", "reconnect_wait", "subject", "timeout",
}}

// reservedHeaders are the message headers a message's own headers may not
// set: the sink's Outbox-* headers and the NATS protocol's Nats-* ones
// (Nats-Msg-Id, Nats-Expected-Stream, ...), which would change how the
// server stores the message.
var reservedHeaders = sinkutil.Reserved{Prefixes: []string{"Nats-"}}

// CheckURL reports whether rawURL is a valid NATS sink URL, without
// connecting anywhere (for configuration checks). The error is the one [New]
// would return.
func CheckURL(rawURL string) error { return sinkutil.ParseError(rawURL, parseURL) }

func parseURL(rawURL string) (*config, error) {
	if !strings.Contains(rawURL, "://") {
		return nil, errors.New("natssink: URL has no scheme; want nats://host:port?subject=NAME")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("natssink: malformed URL: %s", sinkutil.Scrub(sinkutil.ParseErrText(err), rawURL))
	}
	cfg := &config{}
	switch strings.ToLower(u.Scheme) {
	case "nats":
	case "tls", "nats+tls":
		cfg.tls = true
	default:
		return nil, fmt.Errorf("natssink: unsupported URL scheme %q; want nats, tls or nats+tls", u.Scheme)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("natssink: URL path %q is not used; put the subject in ?subject=", u.Path)
	}
	if u.Fragment != "" || strings.Contains(rawURL, "#") {
		// Even a bare trailing "#" would silently cut what follows it.
		return nil, errors.New("natssink: URL must not contain a raw '#' (it starts a fragment that would be dropped); write %23")
	}
	if err := cfg.parseUser(u.User); err != nil {
		return nil, err
	}
	if err := cfg.parseHosts(u.Host); err != nil {
		return nil, err
	}
	if err := query.Read(u.RawQuery, rawURL, cfg.parseQuery); err != nil {
		return nil, fmt.Errorf("natssink: %w", err)
	}
	return cfg, nil
}

func (cfg *config) parseUser(ui *url.Userinfo) error {
	if ui == nil {
		return nil
	}
	name := ui.Username()
	pw, hasPW := ui.Password()
	switch {
	case hasPW && name == "":
		return errors.New("natssink: URL has a password but no user name")
	case hasPW:
		cfg.user, cfg.password = name, pw
	case name != "":
		// A lone user name is how NATS URLs carry a token (nats://token@host).
		cfg.token = name
	}
	return nil
}

func (cfg *config) parseHosts(hosts string) error {
	if hosts == "" {
		return errors.New("natssink: URL has no host; want nats://host:port")
	}
	scheme := "nats"
	if cfg.tls {
		scheme = "tls"
	}
	for h := range strings.SplitSeq(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// No port: the NATS default.
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), "4222"
		}
		if host == "" {
			return fmt.Errorf("natssink: empty host in %q", hosts)
		}
		if !sinkutil.ValidPort(port) {
			return fmt.Errorf("natssink: bad port %q in %q", port, hosts)
		}
		cfg.servers = append(cfg.servers, scheme+"://"+net.JoinHostPort(host, port))
	}
	return nil
}

func (cfg *config) parseQuery(q sinkutil.Query) error {
	t, streamSubject, err := parseSubject(q.String("subject", SubjectDefault))
	if err != nil {
		return fmt.Errorf("subject: %w", err)
	}
	cfg.subject, cfg.streamSubject = t, streamSubject
	if q.Has("create_stream") {
		cfg.stream = q.String("create_stream", "")
		if err := checkStreamName(cfg.stream); err != nil {
			return fmt.Errorf("create_stream: %w", err)
		}
	} else if q.Has("duplicate_window") {
		return errors.New("duplicate_window only applies with create_stream")
	}
	if err := cfg.parseDurations(q); err != nil {
		return err
	}
	if cfg.maxPending, err = q.Int("max_pending", MaxPendingDefault, 1, 0); err != nil {
		return err
	}
	cfg.name = q.String("name", NameDefault)
	if q.Has("creds") {
		if cfg.creds, err = q.NonEmpty("creds", ""); err != nil {
			return errors.New("creds must name a credentials file")
		}
		if cfg.user != "" || cfg.token != "" {
			return errors.New("creds and URL userinfo are exclusive")
		}
	}
	return nil
}

func (cfg *config) parseDurations(q sinkutil.Query) error {
	var err error
	if cfg.connectTimeout, err = q.Duration("connect_timeout", ConnectTimeoutDefault, sinkutil.Positive, 0); err != nil {
		return err
	}
	if cfg.dupWindow, err = q.Duration("duplicate_window", 0, time.Second, 0); err != nil {
		return err
	}
	if cfg.reconnectWait, err = q.Duration("reconnect_wait", ReconnectWaitDefault, sinkutil.Positive, 0); err != nil {
		return err
	}
	cfg.timeout, err = q.Duration("timeout", TimeoutDefault, sinkutil.Positive, 0)
	return err
}

// parseSubject parses a subject template and derives the stream subject
// covering every subject it can expand to: a token holding a placeholder
// becomes "*", since sanitizeToken keeps each expansion to one token.
func parseSubject(s string) (*sinkutil.Template, string, error) {
	t, err := sinkutil.ParseTemplate(s)
	if err != nil {
		return nil, "", err
	}
	if s == "" {
		return nil, "", errors.New("must not be empty")
	}
	tokens := strings.Split(s, ".")
	for i, tok := range tokens {
		if tok == "" {
			return nil, "", fmt.Errorf("%q has an empty token", s)
		}
		literal := tok
		if strings.Contains(tok, "{") {
			tokens[i] = "*"
			lt, _ := sinkutil.ParseTemplate(tok)
			// The literal parts alone: expand with empty values.
			literal = lt.Expand(emptyMessage, nil)
		}
		if strings.ContainsAny(literal, "*> \t\r\n") || hasControl(literal) {
			return nil, "", fmt.Errorf("%q: token %q may not hold wildcards, spaces or control characters", s, tok)
		}
	}
	return t, strings.Join(tokens, "."), nil
}

func checkStreamName(name string) error {
	switch {
	case name == "":
		return errors.New("must name the stream")
	case strings.ContainsAny(name, ".*>/\\ \t\r\n") || hasControl(name):
		return fmt.Errorf("stream name %q may not hold '.', '*', '>', '/', '\\', spaces or control characters", name)
	}
	return nil
}

func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}
