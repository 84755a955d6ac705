package httpsink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Check reports, in order: the URL is valid; the endpoint is reachable
// (TCP, and TLS with a certificate that verifies, for https) and does not
// refuse the URL's credentials. It sends one HEAD request, which HTTP
// defines as safe (no side effect), with the URL's Basic auth: any answer
// but 401, 403 or 407 passes, since a webhook endpoint often answers HEAD
// with 404 or 405 and only a POST, which a check never sends, proves
// delivery.
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
		// A *url.Error quotes the URL, whose path may hold a token: only
		// the cause and the origin are shown.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return sinkutil.Failed(what, fmt.Errorf("httpsink: %s: %w", s.origin, err), dialFix(err))
	}
	_ = resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
		return sinkutil.Failed(what, fmt.Errorf("httpsink: %s answered %s", s.origin, resp.Status),
			"correct the user and password in the URL (https://user:password@host/...) or the endpoint's access rules")
	}
	return sinkutil.Passed(what, "HEAD answered "+resp.Status)
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
