package sinkutil

import (
	"errors"
	"net/url"
	"strings"
)

// ParseErrText is the text of a URL parse error without the raw URL that
// *url.Error quotes, since that may hold a password.
func ParseErrText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}

// Scrub removes whatever looks like the userinfo of rawURL from msg. A URL
// that failed to parse has no trustworthy structure, so this is a best
// effort on top of ParseErrText.
func Scrub(msg, rawURL string) string {
	rest := rawURL
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at <= 0 {
		return msg
	}
	userinfo := rest[:at]
	if _, pw, ok := strings.Cut(userinfo, ":"); ok && pw != "" {
		msg = strings.ReplaceAll(msg, pw, "xxxxx")
	}
	return strings.ReplaceAll(msg, userinfo, "xxxxx")
}
