package httpsink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Check reports, in order: the URL is valid; the endpoint is reachable
// (TCP, and TLS with a certificate that verifies, for https), something
// answers at its path, and it does not refuse the URL's credentials. It
// sends a HEAD request, which HTTP defines as safe (no side effect), with
// the URL's Basic auth. 401, 403 and 407 fail. 404 and 410 fail too (a
// mistyped path) unless an OPTIONS request, as safe, shows the path accepts
// POST: some frameworks answer HEAD on a POST-only route with 404. Any other
// answer passes (405 is what most receivers of POST answer HEAD): only a
// POST, which a check never sends, proves delivery.
func Check(ctx context.Context, rawURL string) []sinkutil.Check {
	return sinkutil.RunChecks(rawURL, newDefault, func(s *Sink) []sinkutil.Check { return []sinkutil.Check{checkEndpoint(ctx, s)} })
}

// checkEndpoint sends the check's HEAD request.
func checkEndpoint(ctx context.Context, s *Sink) sinkutil.Check {
	what := "endpoint " + s.origin + " reachable and authenticated"
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, s.url, nil)
	if err != nil {
		return sinkutil.Failed(what, fmt.Errorf("httpsink: %s", sinkutil.ParseErrText(err)), "correct the URL")
	}
	if s.user != nil {
		pw, _ := s.user.Password()
		req.SetBasicAuth(s.user.Username(), pw)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return sinkutil.Failed(what, s.requestErr(err), dialFix(err))
	}
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
		return sinkutil.Failed(what, fmt.Errorf("httpsink: %s answered %s", s.origin, resp.Status),
			"correct the user and password in the URL (https://user:password@host/...) or the endpoint's access rules")
	case http.StatusNotFound, http.StatusGone:
		if allow, ok := s.optionsAllow(ctx, req); ok && allowsPost(allow) {
			return sinkutil.Passed(what, "HEAD answered "+resp.Status+", OPTIONS allows "+allow)
		}
		return sinkutil.Failed(what, fmt.Errorf("httpsink: %s answered %s to HEAD, and OPTIONS does not show the path accepting POST", s.origin, resp.Status),
			"correct the path in the URL, or let the receiver answer HEAD or OPTIONS at it")
	}
	return sinkutil.Passed(what, "HEAD answered "+resp.Status)
}

// requestErr is a request's error without the URL, whose path may hold a
// token: a *url.Error quotes it, so only the cause and the origin are shown.
func (s *Sink) requestErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("httpsink: %s: %w", s.origin, err)
}

// optionsAllow sends OPTIONS to the HEAD request's URL, with its
// credentials, and returns the Allow header of a 2xx answer.
func (s *Sink) optionsAllow(ctx context.Context, head *http.Request) (string, bool) {
	req := head.Clone(ctx)
	req.Method = http.MethodOptions
	resp, err := s.client.Do(req)
	if err != nil {
		return "", false
	}
	_ = resp.Body.Close()
	return resp.Header.Get("Allow"), resp.StatusCode/100 == 2
}

// allowsPost reports whether an Allow header lists POST.
func allowsPost(allow string) bool {
	for m := range strings.SplitSeq(allow, ",") {
		if strings.EqualFold(strings.TrimSpace(m), http.MethodPost) {
			return true
		}
	}
	return false
}

func dialFix(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		verify    *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &verify) {
		return "give the endpoint a certificate the system roots trust (or SSL_CERT_FILE), or correct the host name"
	}
	return "start the receiver there, or correct host and port in the URL"
}

// newDefault is New with all default options.
func newDefault(rawURL string) (*Sink, error) { return New(rawURL, nil) }
