package sinkutil

import (
	"errors"
	"net/url"
	"strings"
)

// Redacted replaces a secret in logs and messages.
const Redacted = "xxxxx"

// UnparseableURL stands for a URL that failed to parse: such a value is
// never echoed, since nothing says where its secret parts end.
const UnparseableURL = "<unparseable URL>"

// RedactURL returns rawURL fit for logs and messages. The whole userinfo
// becomes xxxxx: the user name too, since a lone user part is often a token
// (nats://TOKEN@host, an MQTT access token). So does the value of every
// query parameter whose name says it holds a secret (password, token,
// secret, ...). A value that does not parse as a URL comes back as
// [UnparseableURL], never as itself.
func RedactURL(rawURL string) string {
	if rawURL == "" {
		return ""
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return UnparseableURL
	}
	if u.User != nil {
		u.User = url.User(Redacted)
	}
	u.RawQuery = RedactQuery(u.RawQuery)
	return u.String()
}

// ShownUserinfo is the userinfo part of a sink's description, "" or ending
// in "@": a user beside a password is a name and is shown ("app:xxxxx@"); a
// lone user part is often a token (an MQTT access token, a NATS token) and is
// hidden ("xxxxx@").
func ShownUserinfo(user *url.Userinfo) string {
	if user == nil {
		return ""
	}
	if _, ok := user.Password(); ok {
		return url.PathEscape(user.Username()) + ":" + Redacted + "@"
	}
	return Redacted + "@"
}

// RedactQuery hides the values of secret parameters in a raw query, keeping
// the order and encoding of the rest.
func RedactQuery(raw string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); ok && (err != nil || IsSecretKey(name)) {
			parts[i] = k + "=" + Redacted
		}
	}
	return strings.Join(parts, "&")
}

// IsSecretKey reports whether a setting or query parameter named name holds
// a secret: password, sslpassword, token, secret, api_key and the like.
func IsSecretKey(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"password", "passwd", "secret", "token", "apikey", "api_key", "credential"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return n == "pass" || n == "pwd" || n == "auth"
}

// ParseErrText is the text of a URL parse error without the raw URL that
// *url.Error quotes, and without the quoted fragments of it that the inner
// error names (`invalid port ":p" after host` of "nats://u:p/w@host" is
// the start of the password): the error says what is wrong, never with
// the value's own bytes.
func ParseErrText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return DropQuoted(ue.Err.Error())
	}
	return DropQuoted(err.Error())
}

// DropQuoted removes every Go-quoted string of more than one character
// (with the space or ": " before it) from msg: error texts quote the bad part of a
// value that may hold a secret. A quoted single character (`missing "="`)
// stays.
func DropQuoted(msg string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			break
		}
		end := closingQuote(msg, i+1)
		if end < 0 {
			break
		}
		if end-i <= 2 || (end-i == 3 && msg[i+1] == '\\') {
			b.WriteString(msg[:end+1])
		} else {
			b.WriteString(strings.TrimSuffix(strings.TrimRight(msg[:i], " "), ":"))
		}
		msg = msg[end+1:]
	}
	b.WriteString(msg)
	return b.String()
}

// closingQuote returns the index of the quote that closes a Go-quoted
// string whose contents start at from, or -1.
func closingQuote(s string, from int) int {
	for j := from; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return -1
}

// Scrub removes whatever looks like the userinfo of rawURL, and the values
// of its secret query parameters, from msg, raw and percent-decoded. A URL
// that failed to parse has no trustworthy structure, so this is a best
// effort on top of ParseErrText.
func Scrub(msg, rawURL string) string {
	for _, s := range urlSecrets(rawURL) {
		msg = strings.ReplaceAll(msg, s, Redacted)
	}
	return msg
}

// urlSecrets returns the parts of rawURL that may be secret.
func urlSecrets(rawURL string) []string {
	var out []string
	add := func(s string) {
		if len(s) < 2 {
			return
		}
		out = append(out, s)
		if d, err := url.PathUnescape(s); err == nil && d != s && len(d) >= 2 {
			out = append(out, d)
		}
	}
	rest := rawURL
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	// The authority ends at the first "/", "?" or "#"; in a URL that
	// failed to parse, a "/" may as well be part of the password
	// ("u:pw/rest@host"), so both readings count.
	for _, stop := range []string{"/?#", "?#"} {
		authority := rest
		if i := strings.IndexAny(authority, stop); i >= 0 {
			authority = authority[:i]
		}
		if at := strings.LastIndex(authority, "@"); at > 0 {
			// The password first, so that an error quoting
			// "user:password" still names the user; a lone user part is
			// a token.
			userinfo := authority[:at]
			if _, pw, ok := strings.Cut(userinfo, ":"); ok {
				add(pw)
			}
			add(userinfo)
		}
	}
	if _, q, ok := strings.Cut(rest, "?"); ok {
		q, _, _ = strings.Cut(q, "#")
		for _, p := range strings.Split(q, "&") {
			if k, v, ok := strings.Cut(p, "="); ok && IsSecretKey(k) {
				add(v)
			}
		}
	}
	return out
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
