package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/internal/jsonout"
)

// apiHandler is an API endpoint, called once the request is authenticated.
type apiHandler func(w http.ResponseWriter, r *http.Request, p principal)

// apiErrorBody is the shape of every API error; Term names the filter
// term of a bad_filter.
type apiErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Term    string `json:"term,omitempty"`
		Message string `json:"message"`
	} `json:"error"`
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	var b apiErrorBody
	b.Error.Code, b.Error.Message = code, msg
	writeJSON(w, status, b)
}

// apiFilterError answers 400 bad_filter naming the term.
func apiFilterError(w http.ResponseWriter, fe *outbox.FilterError) {
	var b apiErrorBody
	b.Error.Code, b.Error.Term, b.Error.Message = "bad_filter", fe.Term, cleanErr(fe)
	writeJSON(w, http.StatusBadRequest, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = jsonout.Write(w, v)
}

// api authenticates a read endpoint.
func (s *Server) api(h apiHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok, wait := s.authenticateLimited(r)
		if wait > 0 {
			w.Header().Set("Retry-After", retryAfter(wait))
			apiError(w, http.StatusTooManyRequests, "rate_limited", "too many failed authentications from this address; try again later")
			return
		}
		if !ok {
			s.challenge(w)
			apiError(w, http.StatusUnauthorized, "unauthorized", "authentication required: a bearer token or basic auth")
			return
		}
		h(w, r, p)
	}
}

// apiWrite authenticates a write endpoint, then refuses it on a read-only
// console and on a failed CSRF check.
func (s *Server) apiWrite(h apiHandler) http.HandlerFunc {
	return s.api(func(w http.ResponseWriter, r *http.Request, p principal) {
		if !s.cfg.Write {
			apiError(w, http.StatusForbidden, "read_only", "the console is read-only (start outboxd console with --write, or outboxd run with --console-write to allow actions)")
			return
		}
		switch checkWrite(r, p) {
		case "cross_site":
			apiError(w, http.StatusForbidden, "cross_site", "cross-site request refused")
			return
		case "csrf":
			apiError(w, http.StatusForbidden, "csrf", "missing or wrong "+CSRFHeader+" header for this session")
			return
		}
		h(w, r, p)
	})
}

func (s *Server) challenge(w http.ResponseWriter) {
	if s.cfg.Credentials.Token != "" {
		w.Header().Add("WWW-Authenticate", `Bearer realm="outboxd console"`)
	}
	if s.cfg.Credentials.User != "" {
		w.Header().Add("WWW-Authenticate", `Basic realm="outboxd console", charset="UTF-8"`)
	}
}

// tableOf returns the table the request names, or answers 404.
func (s *Server) tableOf(w http.ResponseWriter, r *http.Request) *table {
	name := r.PathValue("table")
	if name == "" {
		name = r.URL.Query().Get("table")
	}
	if t := s.lookup(name); t != nil {
		return t
	}
	if name == "" {
		apiError(w, http.StatusNotFound, "unknown_table", "the console serves no table yet")
		return nil
	}
	apiError(w, http.StatusNotFound, "unknown_table", "the console does not serve table "+name)
	return nil
}

// decodeBody reads a JSON request body of at most 1 MiB into v.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeFrom(w, http.MaxBytesReader(w, r.Body, 1<<20), v)
}

// decodeBytes reads a JSON body already read into v.
func decodeBytes(w http.ResponseWriter, body []byte, v any) bool {
	return decodeFrom(w, bytes.NewReader(body), v)
}

func decodeFrom(w http.ResponseWriter, r io.Reader, v any) bool {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			apiError(w, http.StatusRequestEntityTooLarge, "too_large", "request body over 1 MiB")
			return false
		}
		apiError(w, http.StatusBadRequest, "bad_request", "invalid JSON body: "+err.Error())
		return false
	}
	return true
}
