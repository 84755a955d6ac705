package cli

import (
	"errors"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// unparseableDSN stands for a connection string pgconn refused: such a
// value is never echoed, since nothing says where its password ends.
const unparseableDSN = "<unparseable DSN>"

// redactDSN returns a connection string fit for display. It is parsed the
// way the dispatcher parses it (pgconn.ParseConfig) and rebuilt: in a URL
// the password and the secret query parameters become xxxxx (the user part
// of a PostgreSQL URL names a role and stays); in the keyword/value form
// every setting is written key=value, password and sslpassword as xxxxx,
// whatever the spacing and quoting were. A string that does not parse comes
// back as "<unparseable DSN: why>", the reason scrubbed of the value.
func redactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return strings.TrimSuffix(unparseableDSN, ">") + ": " + dsnErrText(err, dsn) + ">"
	}
	if isURLDSN(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return unparseableDSN
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), sinkutil.Redacted)
			}
		}
		u.RawQuery = sinkutil.RedactQuery(u.RawQuery)
		return u.String()
	}
	settings, ok := keywordSettings(dsn)
	if !ok {
		return unparseableDSN
	}
	parts := make([]string, len(settings))
	for i, kv := range settings {
		v := kv.raw
		if sinkutil.IsSecretKey(kv.key) {
			v = sinkutil.Redacted
		}
		parts[i] = kv.key + "=" + v
	}
	return strings.Join(parts, " ")
}

func isURLDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// dsnErrText is the text of a pgconn.ParseConfig error without the
// connection string it quotes and without the parts of it that may be
// secret.
func dsnErrText(err error, dsn string) string {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// "cannot parse `DSN`: why (inner)": keep why, and inner without
		// the value it may quote (a *url.Error quotes the whole URL).
		inner := pe.Unwrap()
		if inner != nil {
			msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
		}
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			msg = msg[i+3:]
		}
		if inner != nil {
			msg += " (" + sinkutil.ParseErrText(inner) + ")"
		}
	}
	return scrubDSN(msg, dsn, "")
}

// keywordPassword finds the password settings of a keyword/value string,
// even one pgconn refused: "password = x", "password='a b\'c'".
var keywordPassword = regexp.MustCompile(`(?i)\b(?:ssl)?password\s*=\s*('(?:[^'\\]|\\.)*'?|(?:[^\s\\]|\\.)+)`)

// scrubDSN removes from msg the connection string and whatever in it may be
// a password (the parsed one, when known, included): URL userinfo and
// secret query parameters, keyword password settings raw and unquoted.
func scrubDSN(msg, dsn, password string) string {
	if len(dsn) > 8 {
		msg = strings.ReplaceAll(msg, dsn, "[dsn redacted]")
	}
	if password != "" {
		msg = strings.ReplaceAll(msg, password, sinkutil.Redacted)
	}
	for _, m := range keywordPassword.FindAllStringSubmatch(dsn, -1) {
		v := m[1]
		if len(v) < 2 {
			continue
		}
		msg = strings.ReplaceAll(msg, v, sinkutil.Redacted)
		unquoted := strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
		unquoted = strings.NewReplacer(`\\`, `\`, `\'`, `'`).Replace(unquoted)
		if len(unquoted) >= 2 {
			msg = strings.ReplaceAll(msg, unquoted, sinkutil.Redacted)
		}
	}
	return sinkutil.Scrub(msg, dsn)
}

// keywordSetting is one setting of a keyword/value connection string, its
// value as written (quotes and escapes included).
type keywordSetting struct{ key, raw string }

// keywordSettings splits a keyword/value connection string as libpq does:
// "key = value" with optional spaces around "=", values either
// single-quoted (backslash escapes ' and \) or running to the next space.
func keywordSettings(s string) ([]keywordSetting, bool) {
	const space = " \t\n\r\v\f"
	var out []keywordSetting
	s = strings.TrimLeft(s, space)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, false
		}
		key := strings.Trim(s[:eq], space)
		if key == "" || strings.ContainsAny(key, space) {
			return nil, false
		}
		s = strings.TrimLeft(s[eq+1:], space)
		end := 0
		if strings.HasPrefix(s, "'") {
			end = -1
			for j := 1; j < len(s); j++ {
				if s[j] == '\\' {
					j++
					continue
				}
				if s[j] == '\'' {
					end = j + 1
					break
				}
			}
			if end < 0 {
				return nil, false
			}
		} else {
			for end < len(s) && !strings.ContainsRune(space, rune(s[end])) {
				if s[end] == '\\' {
					end++
				}
				end++
			}
			end = min(end, len(s))
		}
		out = append(out, keywordSetting{key: key, raw: s[:end]})
		s = strings.TrimLeft(s[end:], space)
	}
	return out, true
}
