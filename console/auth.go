package console

import (
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Environment variables [CredentialsFromEnv] reads.
const (
	EnvToken    = "OUTBOXD_CONSOLE_TOKEN"
	EnvUser     = "OUTBOXD_CONSOLE_USER"
	EnvPassword = "OUTBOXD_CONSOLE_PASSWORD"
)

// Credentials are what a request must present: a bearer token, or a user
// and password (basic auth, or the login form, which opens a session).
// Either or both may be set.
type Credentials struct {
	Token          string
	User, Password string
}

// CredentialsFromEnv reads the credentials from OUTBOXD_CONSOLE_TOKEN,
// OUTBOXD_CONSOLE_USER and OUTBOXD_CONSOLE_PASSWORD.
func CredentialsFromEnv(getenv func(string) string) Credentials {
	return Credentials{Token: getenv(EnvToken), User: getenv(EnvUser), Password: getenv(EnvPassword)}
}

func (c Credentials) empty() bool { return c.Token == "" && c.User == "" && c.Password == "" }

func (c Credentials) validate() error {
	if (c.User == "") != (c.Password == "") {
		return errors.New("console: " + EnvUser + " and " + EnvPassword + " go together: set both or neither")
	}
	return nil
}

// equal compares secrets in constant time.
func equal(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func (c Credentials) tokenOK(tok string) bool { return equal(tok, c.Token) }

func (c Credentials) userOK(user, password string) bool {
	// Both compared, so the time taken says nothing about which was wrong.
	u, p := equal(user, c.User), equal(password, c.Password)
	return u && p
}

// principal is who made a request and how.
type principal struct {
	actor string
	// ambient is true when the browser attaches the credential by itself
	// (session cookie, basic auth, no auth at all): such writes need the CSRF
	// token. A bearer token is never ambient.
	ambient bool
	session *session
}

// authenticateLimited is authenticate with guessing bounded: while the
// client address has spent its bucket of failed Authorization headers, such
// a header is not even checked and wait says when to come back; a failed
// check spends a token, a good one none.
func (s *Server) authenticateLimited(r *http.Request) (p principal, ok bool, wait time.Duration) {
	if r.Header.Get("Authorization") == "" {
		p, ok = s.authenticate(r)
		return p, ok, 0
	}
	addr := clientAddr(r)
	if spent, wait := s.badAuth.spent(addr); spent {
		s.logger.Warn("console: authentication rate limited", slog.String("remote", r.RemoteAddr))
		return principal{}, false, wait
	}
	if p, ok = s.authenticate(r); !ok {
		s.badAuth.allow(addr)
	}
	return p, ok, 0
}

// authenticate identifies the request's principal, or returns false.
func (s *Server) authenticate(r *http.Request) (principal, bool) {
	creds := s.cfg.Credentials
	sess := s.sessions.get(r)
	if h := r.Header.Get("Authorization"); h != "" {
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok {
			return principal{actor: "token"}, creds.tokenOK(strings.TrimSpace(tok))
		}
		if user, pass, ok := r.BasicAuth(); ok {
			return principal{actor: user, ambient: true, session: sess}, creds.userOK(user, pass)
		}
		return principal{}, false
	}
	if sess != nil {
		return principal{actor: sess.actor, ambient: true, session: sess}, true
	}
	if creds.empty() {
		return principal{actor: "anonymous", ambient: true}, true
	}
	return principal{}, false
}
