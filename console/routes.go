package console

import (
	"context"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"strings"
)

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.loginSubmit)
	mux.HandleFunc("POST /logout", s.logout)

	mux.HandleFunc("GET /{$}", s.page(s.overviewPage))
	mux.HandleFunc("GET /t/{table}/{$}", s.page(s.overviewPage))
	mux.HandleFunc("GET /t/{table}/messages", s.page(s.messagesPage))
	mux.HandleFunc("GET /t/{table}/messages/{id}", s.page(s.messagePage))
	mux.HandleFunc("GET /t/{table}/dead", s.page(s.deadPage))
	mux.HandleFunc("GET /t/{table}/dead/top", s.page(s.deadTopPage))
	mux.HandleFunc("GET /t/{table}/replay", s.page(s.replayPage))
	mux.HandleFunc("GET /t/{table}/audit", s.page(s.auditPage))

	mux.HandleFunc("GET /api/v1/status", s.api(s.apiStatus))
	mux.HandleFunc("GET /api/v1/tables", s.api(s.apiTables))
	mux.HandleFunc("GET /api/v1/tables/{table}/overview", s.api(s.apiOverview))
	mux.HandleFunc("GET /api/v1/tables/{table}/samples", s.api(s.apiSamples))
	mux.HandleFunc("GET /api/v1/tables/{table}/messages", s.api(s.apiMessages))
	mux.HandleFunc("GET /api/v1/tables/{table}/messages/{id}", s.api(s.apiMessage))
	mux.HandleFunc("GET /api/v1/tables/{table}/count", s.api(s.apiCount))
	mux.HandleFunc("GET /api/v1/tables/{table}/audit", s.api(s.apiAudit))
	mux.HandleFunc("GET /api/v1/tables/{table}/dead/top", s.api(s.apiDeadTop))
	mux.HandleFunc("POST /api/v1/tables/{table}/dead/retry", s.apiWrite(s.apiDeadAction("retry")))
	mux.HandleFunc("POST /api/v1/tables/{table}/dead/skip", s.apiWrite(s.apiDeadAction("skip")))
	mux.HandleFunc("POST /api/v1/tables/{table}/replay", s.apiWrite(s.apiReplay))
	mux.HandleFunc("POST /api/v1/tables/{table}/messages/{id}/retry-now", s.apiWrite(s.apiRetryNow))
	mux.HandleFunc("GET /api/v1/tables/{table}/pauses", s.api(s.apiPauses))
	mux.HandleFunc("POST /api/v1/tables/{table}/pause", s.apiWrite(s.apiPause))
	mux.HandleFunc("POST /api/v1/tables/{table}/resume", s.apiWrite(s.apiResume))
	mux.HandleFunc("POST /api/v1/tables/{table}/routes/{route}/pause", s.apiWrite(s.apiPause))
	mux.HandleFunc("POST /api/v1/tables/{table}/routes/{route}/resume", s.apiWrite(s.apiResume))
	mux.HandleFunc("GET /api/v1/jobs", s.api(s.apiJobs))
	mux.HandleFunc("GET /api/v1/jobs/{id}", s.api(s.apiJob))
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", s.apiWrite(s.apiJobCancel))
	mux.HandleFunc("/api/", s.api(func(w http.ResponseWriter, r *http.Request, _ principal) {
		apiError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	}))
	return s.checkHost(secureHeaders(s.cfg.https(), s.deadline(mux)))
}

// deadline bounds each request's context by Config.RequestTimeout, which
// cancels the statement in flight when it passes (pgx sends the server a
// cancel request).
func (s *Server) deadline(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// csp allows only the console's own scripts, styles and requests: no inline
// script or style, no framing, no form posts elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// checkHost answers 421 a request whose Host names none of
// Config.AllowedHosts: a page the operator visits could otherwise rebind
// its own name to the console's address (DNS rebinding) and read it with
// the operator's browser, which a loopback console without credentials
// would answer.
func (s *Server) checkHost(next http.Handler) http.Handler {
	if len(s.cfg.AllowedHosts) == 0 {
		return next
	}
	allowed := map[string]bool{}
	for _, h := range s.cfg.AllowedHosts {
		allowed[hostName(h)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !allowed[hostName(r.Host)] {
			http.Error(w, "misdirected request: this console does not answer to host "+strconv.Quote(r.Host)+
				" (the operator names the hosts it answers to)", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostName is a Host header's or an allowed host's name: without its
// port, brackets or trailing dot, lower case.
func hostName(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
}

// hsts keeps a browser that reached the console over HTTPS on HTTPS for a
// year. Not for subdomains: the console's name may be a subdomain of a
// site it does not own.
const hsts = "max-age=31536000"

func secureHeaders(https bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if https {
			h.Set("Strict-Transport-Security", hsts)
		}
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}
