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

// PercentEncodeHeader encodes a header value as the CloudEvents HTTP binding
// (section 3.1.3.2) requires for ce-* headers: space, double quote, percent
// and every byte outside printable ASCII 0x21-0x7E become %XY of the UTF-8
// bytes, upper-case. Values without such bytes pass unchanged; receivers
// decode with a percent-decoder (Go: url.PathUnescape).
func PercentEncodeHeader(v string) string {
	const hex = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(v); i++ {
		if needsEncoding(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 2*n)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if needsEncoding(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0x0F])
		} else {
			b.WriteByte(c)
		}
	}
	return b.String()
}

func needsEncoding(c byte) bool { return c < 0x21 || c > 0x7E || c == '"' || c == '%' }
