package console

import (
	"net/http"
	"net/url"
)

// CSRFHeader carries the session's CSRF token on writes.
const CSRFHeader = "X-CSRF-Token"

// checkWrite refuses a cross-site or forged write: the request must not
// come from another site (Sec-Fetch-Site, Origin), and a write riding on an
// ambient credential must echo the session's CSRF token. It returns the
// error code to answer with, or "".
func checkWrite(r *http.Request, p principal) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return "cross_site"
	}
	if origin := r.Header.Get("Origin"); origin != "" && !sameOrigin(origin, r) {
		return "cross_site"
	}
	if !p.ambient {
		return ""
	}
	if p.session == nil {
		return "csrf"
	}
	tok := r.Header.Get(CSRFHeader)
	if tok == "" {
		tok = r.PostFormValue("csrf")
	}
	if !equal(tok, p.session.csrf) {
		return "csrf"
	}
	return ""
}

// sameOrigin reports whether origin names the host (and port) the request
// was sent to. The scheme is not compared: behind a TLS-terminating proxy the
// browser's https origin reaches the console over http.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return u.Host == r.Host
}
