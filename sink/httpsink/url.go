package httpsink

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/outboxd/outbox/sink/sinkutil"
	"github.com/outboxd/outbox/webhook"
)

// The sink takes no query parameters of its own: the URL's query belongs to
// the endpoint and is sent as it is.

// CheckURL reports whether rawURL is a valid sink URL, without sending
// anything (for configuration checks). The error is the one [New] would
// return for it.
func CheckURL(rawURL string) error { return sinkutil.ParseError(rawURL, parseURL) }

// parseURL checks rawURL: an absolute http:// or https:// URL holding no
// signing secret. Errors never quote the URL.
func parseURL(rawURL string) (*url.URL, error) {
	// Checked on the raw text, before parsing can fail and quote it.
	if strings.Contains(strings.ToLower(rawURL), strings.ToLower(webhook.SecretPrefix)) {
		return nil, errors.New("httpsink: the URL holds a " + webhook.SecretPrefix + " signing secret; pass it in Options.Secrets, which keeps it out of URLs and logs")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("httpsink: malformed URL: %s", sinkutil.Scrub(sinkutil.ParseErrText(err), rawURL))
	}
	switch u.Scheme {
	case "http", "https":
	case "":
		return nil, errors.New("httpsink: URL has no scheme; want an http:// or https:// URL")
	default:
		return nil, fmt.Errorf("httpsink: unsupported URL scheme %q; want http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("httpsink: URL has no host; want %s://host/path", u.Scheme)
	}
	return u, nil
}
