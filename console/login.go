package console

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

type loginData struct {
	Next, Error string
	Token, User bool
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.renderLogin(w, r.URL.Query().Get("next"), "")
}

func (s *Server) renderLogin(w http.ResponseWriter, next, msg string) {
	c := s.cfg.Credentials
	if msg != "" {
		w.WriteHeader(http.StatusUnauthorized)
	}
	s.render(w, "login", loginData{Next: safeNext(next), Error: msg, Token: c.Token != "", User: c.User != ""})
}

// loginSubmit checks the token or user and password and opens a session.
// The form must come from the console's own pages (Origin, Sec-Fetch-Site).
func (s *Server) loginSubmit(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if code := checkWrite(r, principal{}); code != "" {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	if ok, wait := s.signIn.allow(clientAddr(r)); !ok {
		secs := int(math.Ceil(wait.Seconds()))
		s.logger.Warn("console: sign-in rate limited", slog.String("remote", r.RemoteAddr))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		w.WriteHeader(http.StatusTooManyRequests)
		c := s.cfg.Credentials
		s.render(w, "login", loginData{Next: safeNext(r.PostFormValue("next")),
			Error: fmt.Sprintf("Too many sign-in attempts from this address; try again in %d s.", secs),
			Token: c.Token != "", User: c.User != ""})
		return
	}
	c := s.cfg.Credentials
	next := safeNext(r.PostFormValue("next"))
	var actor string
	switch {
	case c.empty():
		actor = "anonymous"
	case r.PostFormValue("token") != "" && c.tokenOK(r.PostFormValue("token")):
		actor = "token"
	case r.PostFormValue("user") != "" && c.userOK(r.PostFormValue("user"), r.PostFormValue("password")):
		actor = r.PostFormValue("user")
	default:
		s.logger.Warn("console: sign-in refused", slog.String("remote", r.RemoteAddr))
		s.renderLogin(w, next, "Wrong credentials.")
		return
	}
	s.sessions.open(w, r, actor, s.cfg.https())
	s.logger.Info("console: signed in", slog.String("actor", actor), slog.String("remote", r.RemoteAddr))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	p, ok := s.authenticate(r)
	if ok && checkWrite(r, p) == "" {
		s.sessions.close(w, r, s.cfg.https())
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect on the console itself: a path,
// never what a browser reads as another host. Browsers drop tabs and
// newlines from a URL and read a backslash as a slash, so "/\t/evil" and
// "/\\evil" are "//evil" to them: a control character or a backslash
// anywhere sends the operator to the overview instead.
func safeNext(next string) string {
	bad := strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' })
	if bad || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" || u.User != nil {
		return "/"
	}
	return next
}
