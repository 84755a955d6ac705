package natssink

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
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

var queryKeys = []string{
	"connect_timeout", "create_stream", "creds", "duplicate_window", "max_pending",
	"name", "reconnect_wait", "subject", "timeout",
}

// CheckURL reports whether rawURL is a valid NATS sink URL, without
// connecting anywhere (for configuration checks). The error is the one [New]
// would return.
func CheckURL(rawURL string) error {
	_, err := parseURL(rawURL)
	return err
}

func parseURL(rawURL string) (*config, error) {
	if !strings.Contains(rawURL, "://") {
		return nil, errors.New("natssink: URL has no scheme; want nats://host:port?subject=NAME")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("natssink: malformed URL: %s", sinkutil.Scrub(sinkutil.ParseErrText(err), rawURL))
	}
	cfg := &config{
		connectTimeout: ConnectTimeoutDefault,
		maxPending:     MaxPendingDefault,
		name:           NameDefault,
		reconnectWait:  ReconnectWaitDefault,
		timeout:        TimeoutDefault,
	}
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
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("natssink: malformed query: %w", err)
	}
	if err := cfg.parseQuery(q); err != nil {
		return nil, err
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
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("natssink: bad port %q in %q", port, hosts)
		}
		cfg.servers = append(cfg.servers, scheme+"://"+net.JoinHostPort(host, port))
	}
	return nil
}

func (cfg *config) parseQuery(q url.Values) error {
	for k, vs := range q {
		if !slices.Contains(queryKeys, k) {
			return fmt.Errorf("natssink: unknown URL parameter %q (known: %s)", k, strings.Join(queryKeys, ", "))
		}
		if len(vs) > 1 {
			return fmt.Errorf("natssink: URL parameter %q given %d times", k, len(vs))
		}
	}
	subject := q.Get("subject")
	if !q.Has("subject") {
		subject = SubjectDefault
	}
	t, streamSubject, err := parseSubject(subject)
	if err != nil {
		return fmt.Errorf("natssink: subject: %w", err)
	}
	cfg.subject, cfg.streamSubject = t, streamSubject

	if q.Has("create_stream") {
		cfg.stream = q.Get("create_stream")
		if err := checkStreamName(cfg.stream); err != nil {
			return fmt.Errorf("natssink: create_stream: %w", err)
		}
	}
	if q.Has("duplicate_window") {
		if cfg.stream == "" {
			return errors.New("natssink: duplicate_window only applies with create_stream")
		}
	}
	for _, d := range []struct {
		key string
		dst *time.Duration
	}{
		{"connect_timeout", &cfg.connectTimeout},
		{"duplicate_window", &cfg.dupWindow},
		{"reconnect_wait", &cfg.reconnectWait},
		{"timeout", &cfg.timeout},
	} {
		if !q.Has(d.key) {
			continue
		}
		v, err := time.ParseDuration(q.Get(d.key))
		if err != nil || v <= 0 {
			return fmt.Errorf("natssink: %s must be a positive duration such as 5s, got %q", d.key, q.Get(d.key))
		}
		*d.dst = v
	}
	if q.Has("duplicate_window") && cfg.dupWindow < time.Second {
		return fmt.Errorf("natssink: duplicate_window must be at least 1s, got %s", cfg.dupWindow)
	}
	if q.Has("max_pending") {
		n, err := strconv.Atoi(q.Get("max_pending"))
		if err != nil || n < 1 {
			return fmt.Errorf("natssink: max_pending must be a positive integer, got %q", q.Get("max_pending"))
		}
		cfg.maxPending = n
	}
	if q.Has("name") {
		cfg.name = q.Get("name")
	}
	if q.Has("creds") {
		cfg.creds = q.Get("creds")
		if cfg.creds == "" {
			return errors.New("natssink: creds must name a credentials file")
		}
		if cfg.user != "" || cfg.token != "" {
			return errors.New("natssink: creds and URL userinfo are exclusive")
		}
	}
	return nil
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
