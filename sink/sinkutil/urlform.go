package sinkutil

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// URLForm describes the URL a sink takes, so that its common parts are
// parsed, and refused, alike in every sink.
type URLForm struct {
	// Pkg prefixes every error ("redissink").
	Pkg string
	// Schemes are the accepted schemes, compared exactly.
	Schemes []string
	// Rest is what follows "scheme://" in the URL, for the error naming a
	// missing host ("host:port").
	Rest string
}

// Parse parses rawURL and checks its scheme and host. Its errors never quote
// a secret of rawURL.
func (f URLForm) Parse(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%s: malformed URL: %s", f.Pkg, Scrub(ParseErrText(err), rawURL))
	}
	switch {
	case u.Scheme == "":
		return nil, fmt.Errorf("%s: URL has no scheme; want %s://", f.Pkg, strings.Join(f.Schemes, ":// or "))
	case !slices.Contains(f.Schemes, u.Scheme):
		return nil, fmt.Errorf("%s: unsupported URL scheme %q; want %s", f.Pkg, u.Scheme, strings.Join(f.Schemes, " or "))
	case u.Hostname() == "":
		return nil, fmt.Errorf("%s: URL has no host; want %s://%s", f.Pkg, u.Scheme, f.Rest)
	}
	return u, nil
}

// errNoFragment is the error for a URL holding a raw '#'.
var errNoFragment = errors.New("URL must not contain a raw '#' (it starts a fragment that would be dropped); write %23")

// NoFragment refuses a raw '#' in rawURL: even a bare trailing one would
// silently cut what follows it.
func (f URLForm) NoFragment(rawURL string) error {
	if strings.Contains(rawURL, "#") {
		return fmt.Errorf("%s: %w", f.Pkg, errNoFragment)
	}
	return nil
}

// ValidPort reports whether port is a TCP port number, 1 to 65535.
func ValidPort(port string) bool {
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// TLSConfig is the TLS configuration of a sink dialing host: a clone of
// given (a sink option) or, without one, TLS 1.2 at least; its ServerName
// is host unless given names one.
func TLSConfig(given *tls.Config, host string) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if given != nil {
		c = given.Clone()
	}
	if c.ServerName == "" {
		c.ServerName = host
	}
	return c
}
