package console

import (
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"sync"
	"time"
)

const (
	sessionCookie = "outboxd_console"
	sessionTTL    = 12 * time.Hour
	sessionsMax   = 10000
)

// session is a browser's login. Its CSRF token is tied to it: a write that
// rides on the session cookie must echo the token, which only pages served
// to that session contain.
type session struct {
	id, actor, csrf string
	expires         time.Time
}

type sessions struct {
	mu   sync.Mutex
	byID map[string]*session
}

func newSessions() *sessions { return &sessions{byID: map[string]*session{}} }

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// get returns the request's live session, if any.
func (ss *sessions) get(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	sess := ss.byID[c.Value]
	if sess == nil || time.Now().After(sess.expires) {
		delete(ss.byID, c.Value)
		return nil
	}
	return sess
}

// open starts a session for actor and sets its cookie.
func (ss *sessions) open(w http.ResponseWriter, r *http.Request, actor string, https bool) *session {
	sess := &session{id: randomToken(), actor: actor, csrf: randomToken(), expires: time.Now().Add(sessionTTL)}
	ss.mu.Lock()
	if len(ss.byID) >= sessionsMax {
		ss.evictLocked()
	}
	ss.byID[sess.id] = sess
	ss.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: sess.id, Path: "/", HttpOnly: true, Secure: https || r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds()),
	})
	return sess
}

// close ends the request's session and clears its cookie.
func (ss *sessions) close(w http.ResponseWriter, r *http.Request, https bool) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		ss.mu.Lock()
		delete(ss.byID, c.Value)
		ss.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: https || r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// evictLocked drops expired sessions, or all when none has expired, so a
// flood of logins cannot grow the map without bound.
func (ss *sessions) evictLocked() {
	now := time.Now()
	for id, s := range ss.byID {
		if now.After(s.expires) {
			delete(ss.byID, id)
		}
	}
	if len(ss.byID) >= sessionsMax {
		clear(ss.byID)
	}
}
