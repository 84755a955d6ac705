package kafkasink

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// parseAuthority reads [user:password@]host:port[,host:port...].
func (c *config) parseAuthority(authority string) error {
	hosts := authority
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		hosts = authority[at+1:]
		rawUser, rawPass, _ := strings.Cut(authority[:at], ":")
		var err1, err2 error
		c.user, err1 = url.PathUnescape(rawUser)
		c.password, err2 = url.PathUnescape(rawPass)
		if err1 != nil || err2 != nil {
			return errors.New("URL userinfo has an invalid %-escape")
		}
		if c.user == "" {
			return errors.New("URL userinfo has an empty user name")
		}
	}
	seeds, err := parseHosts(hosts)
	c.seeds = seeds
	return err
}

// parseHosts splits a comma-separated broker list; a host without a port
// gets Kafka's 9092.
func parseHosts(s string) ([]string, error) {
	if s == "" {
		return nil, errors.New("URL has no broker address; want kafka://host:port[,host:port...]")
	}
	var out []string
	for h := range strings.SplitSeq(s, ",") {
		if h == "" {
			return nil, fmt.Errorf("empty broker address in %q", s)
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			// A bare host (or bracketed IPv6 address) takes the default port.
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), "9092"
			if strings.ContainsAny(host, "[]") || (strings.Contains(host, ":") && !strings.HasPrefix(h, "[")) {
				return nil, fmt.Errorf("invalid broker address %q: write IPv6 addresses in brackets, [::1]:9092", h)
			}
		}
		if host == "" {
			return nil, fmt.Errorf("invalid broker address %q: empty host", h)
		}
		if !sinkutil.ValidPort(port) {
			return nil, fmt.Errorf("invalid broker address %q: port must be 1-65535", h)
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}
