// Package httpsink delivers outbox messages to an HTTP webhook as
// CloudEvents in binary content mode: one POST per message, the payload as
// the body, the event attributes as ce-* headers.
//
// Outcomes map onto the [outbox.Sink] classification:
//
//   - 2xx: delivered.
//   - 425 Too Early: [outbox.Defer], the receiver is not ready for this
//     event yet (its delay comes from Retry-After, else
//     [Options.DeferDelay]).
//   - 408, 409, 429 and 5xx: [outbox.RetryableAfter], with Retry-After as
//     the floor of the backoff. 409 Conflict is what a receiver implementing
//     the IETF Idempotency-Key draft answers while an earlier delivery of the
//     same key is still in progress (a lost lease re-delivers it).
//   - 401, 403 and 407: [outbox.Unavailable]. A webhook receiver refusing
//     credentials almost always means a rotated secret or token, a condition
//     of the endpoint rather than of the message, so the message keeps its
//     attempt.
//   - A server certificate the client does not trust (expired, unknown
//     authority, wrong host name): [outbox.Unavailable], for the same reason.
//   - Timeouts, connection errors and a cancelled context: [outbox.Retryable].
//   - Anything else, 3xx included (redirects are never followed): a
//     [outbox.Permanent] error carrying the status and a body excerpt.
//
// The producer's [outbox.Message.Headers] (trace context, correlation ids)
// go out as request headers too, below everything the sink sets itself:
// see [Sink.Publish].
//
// With [Options.Secrets] set, every request is also signed as Standard
// Webhooks defines (webhook-id, webhook-timestamp, webhook-signature; see
// package [webhook]), so the receiver can check it with [webhook.Verifier].
package httpsink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
	"github.com/outboxd/outbox/webhook"
)

// Defaults for [Options] fields and the transport built when
// [Options.Client] is nil.
const (
	MaxErrorBodyDefault        = 256
	MaxIdleConnsPerHostDefault = 64
	DialTimeoutDefault         = 10 * time.Second
	TLSHandshakeTimeoutDefault = 10 * time.Second
	IdleConnTimeoutDefault     = 90 * time.Second
	// MaxRetryAfter caps the delay taken from a Retry-After header, so a
	// misconfigured receiver cannot park messages for years.
	MaxRetryAfter = 24 * time.Hour
)

// maxDrain bounds how much of a response body is read and discarded so the
// connection can be reused; a larger body costs a new connection, not an
// unbounded read.
const maxDrain = 64 << 10

// Options configures a [Sink]. A nil *Options means all defaults.
type Options struct {
	// Client sends the requests. Its CheckRedirect is replaced (on a copy) so
	// that redirects are returned, not followed: a 301/302 turns a POST into
	// a body-less GET whose 200 would mark the message delivered. Leave
	// Client.Timeout at zero: the publish context already bounds each
	// request. Defaults to the sink's own HTTP/1.1 keep-alive transport
	// (MaxIdleConnsPerHostDefault idle connections, DialTimeoutDefault,
	// TLSHandshakeTimeoutDefault, IdleConnTimeoutDefault, the system's
	// root certificates), which writes each request and reads its response
	// on the publishing goroutine, about a quarter less CPU per delivery
	// than net/http's Transport; when the environment names a proxy for
	// the URL (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), a net/http transport
	// that uses it. Close releases the idle connections of either. Pass a
	// Client for HTTP/2, client certificates or other roots.
	Client *http.Client
	// DeferDelay is the delay of the [outbox.Defer] returned for a 425
	// without a usable Retry-After. Defaults to 0, which lets the
	// dispatcher's DeferDelay apply.
	DeferDelay time.Duration
	// Headers are extra static headers sent with every request (an
	// Authorization token, a tenant id). They cannot replace the headers the
	// sink sets itself (Content-Type, Idempotency-Key, ce-*, Outbox-*, and
	// webhook-* when Secrets is set). Defaults to none.
	Headers http.Header
	// MaxErrorBody is how many bytes of a failed response's body are kept in
	// the returned error. Defaults to MaxErrorBodyDefault; negative keeps
	// none.
	MaxErrorBody int
	// Secrets sign every request as Standard Webhooks defines: each is
	// "whsec_" and the base64 of a 24 to 64 byte key, and each adds one
	// signature to the webhook-signature header, so listing the new secret
	// and the old one rotates the key without downtime. The webhook-id is
	// the message ID and the webhook-timestamp the time of sending. A
	// secret never appears in an error; none may be put in the URL, which
	// New rejects, since URLs end up in logs and proxies. Defaults to none:
	// requests are not signed.
	Secrets []string
}

// Sink is an [outbox.Sink] that POSTs each message to one URL. It is safe for
// concurrent use.
type Sink struct {
	client       *http.Client
	deferDelay   time.Duration
	headers      http.Header
	maxErrorBody int
	// origin (scheme://host) names the endpoint in errors: the path and
	// query may embed secrets (many webhook URLs do) and the userinfo
	// certainly does, so neither goes into last_error or logs.
	origin       string
	ownTransport *http.Transport
	// h1 is the sink's own transport when Options.Client is nil and no
	// proxy applies (see h1Transport); Publish calls it directly, client
	// wraps it for everything else.
	h1 *h1Transport
	// signer is nil when requests are not signed.
	signer *webhook.Signer
	url    string
	user   *url.Userinfo
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink posting to rawURL, which must be an absolute http:// or
// https:// URL. Userinfo in the URL (https://user:password@host/...) is sent
// as HTTP Basic authentication and never appears in errors.
func New(rawURL string, opts *Options) (*Sink, error) {
	u, opts, err := sinkutil.Prepare(rawURL, opts, parseURL)
	if err != nil {
		return nil, err
	}
	if opts.DeferDelay < 0 {
		return nil, fmt.Errorf("httpsink: DeferDelay must not be negative, got %s", opts.DeferDelay)
	}
	s := &Sink{
		deferDelay:   opts.DeferDelay,
		headers:      opts.Headers.Clone(),
		maxErrorBody: opts.MaxErrorBody,
		origin:       u.Scheme + "://" + u.Host,
		user:         u.User,
	}
	if s.maxErrorBody == 0 {
		s.maxErrorBody = MaxErrorBodyDefault
	}
	if len(opts.Secrets) > 0 {
		// webhook's errors name a bad secret by position, never by value.
		if s.signer, err = webhook.NewSigner(opts.Secrets...); err != nil {
			return nil, fmt.Errorf("httpsink: Secrets: %w", err)
		}
	}
	// The password travels only in the Authorization header, so no error
	// built from the request URL (by net/http or by us) can carry it.
	u.User = nil
	s.url = u.String()
	if opts.Client != nil {
		c := *opts.Client
		c.CheckRedirect = noRedirect
		s.client = &c
	} else if proxy, _ := http.ProxyFromEnvironment(&http.Request{URL: u}); proxy != nil {
		s.ownTransport = newTransport()
		s.client = &http.Client{Transport: s.ownTransport, CheckRedirect: noRedirect}
	} else {
		s.h1 = newH1Transport(u.Hostname(), portOf(u), u.Scheme == "https")
		s.client = &http.Client{Transport: s.h1, CheckRedirect: noRedirect}
	}
	return s, nil
}

// portOf is u's port, or its scheme's.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// do sends req on the sink's own transport, or the client's.
func (s *Sink) do(req *http.Request) (*http.Response, error) {
	if s.h1 != nil {
		return s.h1.RoundTrip(req)
	}
	return s.client.Do(req)
}

func newTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: DialTimeoutDefault, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4 * MaxIdleConnsPerHostDefault,
		MaxIdleConnsPerHost:   MaxIdleConnsPerHostDefault,
		IdleConnTimeout:       IdleConnTimeoutDefault,
		TLSHandshakeTimeout:   TLSHandshakeTimeoutDefault,
		ExpectContinueTimeout: time.Second,
	}
}

func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Publish POSTs msg and classifies the outcome; see the package doc.
//
// Each entry of msg.Headers is sent as a request header, unless the request
// already has that header (the sink's own, [Options.Headers], basic auth),
// the name is one the sink or the transport owns whether set or not
// (Content-*, Idempotency-Key, Ce-*, Outbox-*, Webhook-*, Authorization,
// Host, hop-by-hop headers...), or the entry is not a valid HTTP header
// field: a producer's metadata must neither forge the delivery's identity
// or signature nor make net/http refuse the whole request.
func (s *Sink) Publish(ctx context.Context, msg *outbox.Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(msg.Payload))
	if err != nil {
		return outbox.Permanent(fmt.Errorf("httpsink: building request for %s: %w", s.origin, err))
	}
	h := req.Header
	for k, vs := range s.headers {
		h[k] = append([]string(nil), vs...)
	}
	if s.user != nil && h.Get("Authorization") == "" {
		pw, _ := s.user.Password()
		req.SetBasicAuth(s.user.Username(), pw)
	}
	id := msg.IDString()
	h.Set("Content-Type", "application/json")
	// Besides telling the receiver how to deduplicate, Idempotency-Key makes
	// net/http treat the POST as replayable, so a request that hit a
	// keep-alive connection the server had just closed is retried on a new
	// one instead of failing.
	h.Set("Idempotency-Key", id)
	h.Set("Ce-Specversion", "1.0")
	h.Set("Ce-Id", id)
	h.Set("Ce-Type", sinkutil.PercentEncodeHeader(msg.EventType))
	h.Set("Ce-Source", sinkutil.PercentEncodeHeader(msg.AggregateType))
	h.Set("Ce-Subject", sinkutil.PercentEncodeHeader(msg.AggregateID))
	h.Set("Ce-Time", msg.CreatedAt.UTC().Format(time.RFC3339Nano))
	h.Set("Outbox-Row-Id", strconv.FormatInt(msg.ID, 10))
	h.Set("Outbox-Fencing-Token", strconv.FormatInt(msg.FencingToken, 10))
	h.Set("Outbox-Attempt", strconv.Itoa(msg.Attempt))
	if r := msg.Replay(); r != "" {
		h.Set(sinkutil.HeaderReplay, r)
	}
	if s.signer != nil {
		// Signed at send time, not at CreatedAt: the receiver's replay
		// window would otherwise reject every retry of an old message.
		s.signer.SetHeaders(h, id, time.Now(), msg.Payload)
	}
	for k, v := range msg.Headers {
		ck := http.CanonicalHeaderKey(k)
		if _, taken := h[ck]; taken || reservedHeaders.Has(ck) || !validHeaderName(k) || !validHeaderValue(v) {
			msg.DropHeader(k)
			continue
		}
		h[ck] = []string{v}
	}

	resp, err := s.do(req) //nolint:bodyclose // drainClose(resp.Body) is deferred below, once err is known to be nil
	if err != nil {
		if sinkutil.IsCertificateError(err) {
			return outbox.Unavailable(s.transportError(err))
		}
		return outbox.Retryable(s.transportError(err))
	}
	defer drainClose(resp.Body)
	return s.classify(resp)
}

// classify maps a response onto the outcome (see the package doc), which
// carries the status code for the attempt history.
func (s *Sink) classify(resp *http.Response) error {
	if code := resp.StatusCode; code < 200 || code > 299 {
		return outbox.WithResponseStatus(s.outcome(resp), code)
	}
	return nil
}

// outcome is the outcome of a response that is not a success.
func (s *Sink) outcome(resp *http.Response) error {
	code := resp.StatusCode
	switch {
	case code == http.StatusUnauthorized, code == http.StatusForbidden, code == http.StatusProxyAuthRequired:
		return outbox.Unavailable(s.statusError(resp))
	case code == http.StatusTooEarly:
		delay, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		if !ok {
			delay = s.deferDelay
		}
		return outbox.Defer(delay, s.statusError(resp).Error())
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooManyRequests,
		code >= 500 && code <= 599:
		floor, _ := ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
		return outbox.RetryableAfter(s.statusError(resp), floor)
	default:
		return outbox.Permanent(s.statusError(resp))
	}
}

// Close releases the idle connections of the transport the sink built. A
// client passed in [Options.Client] belongs to the caller and is left alone.
func (s *Sink) Close() error {
	if s.ownTransport != nil {
		s.ownTransport.CloseIdleConnections()
	}
	if s.h1 != nil {
		s.h1.CloseIdleConnections()
	}
	return nil
}

// transportError rewrites net/http's *url.Error, whose text holds the full
// request URL, to name only the origin; the cause stays wrapped so callers
// can still match context.DeadlineExceeded, net.Error and the like.
func (s *Sink) transportError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("httpsink: POST %s: %w", s.origin, err)
}

// statusError reads a bounded excerpt of the body for the error text.
func (s *Sink) statusError(resp *http.Response) error {
	msg := fmt.Sprintf("httpsink: POST %s: HTTP %d", s.origin, resp.StatusCode)
	if text := http.StatusText(resp.StatusCode); text != "" {
		msg += " " + text
	}
	if s.maxErrorBody > 0 {
		// One extra byte tells whether the body was cut.
		b, _ := io.ReadAll(io.LimitReader(resp.Body, int64(s.maxErrorBody)+1))
		if excerpt := truncate(b, s.maxErrorBody); excerpt != "" {
			msg += ": " + excerpt
		}
	}
	return errors.New(msg)
}

// truncate returns b as valid UTF-8 of at most limit bytes of b, cut on a
// rune boundary and ending in "…" when b was longer. Control characters
// become spaces so the excerpt stays one line in last_error and in logs.
func truncate(b []byte, limit int) string {
	cut := len(b) > limit
	if cut {
		n := limit
		// Back up to the start of the rune straddling the limit; at most
		// UTFMax-1 steps for valid UTF-8, bounded anyway for garbage.
		for i := 0; i < utf8.UTFMax && n > 0 && !utf8.RuneStart(b[n]); i++ {
			n--
		}
		b = b[:n]
	}
	s := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(string(b), "\uFFFD"))
	s = strings.TrimSpace(s)
	if cut {
		s += "…"
	}
	return s
}

func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}

// validHeaderName reports whether k is an RFC 9110 token, as net/http
// requires of a header name.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether net/http accepts v as a header value: no
// control character but horizontal tab, so no line break can start a
// header of the producer's choosing.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < 0x20 && c != '\t') || c == 0x7F {
			return false
		}
	}
	return true
}

// ParseRetryAfter parses an HTTP Retry-After value, either delta-seconds
// ("120") or an HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT") taken relative
// to now. A date in the past gives 0; values beyond [MaxRetryAfter] are
// capped to it. ok is false when value is empty or not in either form.
func ParseRetryAfter(value string, now time.Time) (d time.Duration, ok bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if allDigits(value) {
		secs, err := strconv.ParseUint(value, 10, 64)
		if err != nil || secs > uint64(MaxRetryAfter/time.Second) {
			// Only overflow fails here, and an overflowing number of
			// seconds is as absurd as any other huge one.
			return MaxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(value)
	if err != nil {
		return 0, false
	}
	// Sub saturates instead of overflowing, so clamping is enough.
	return min(max(t.Sub(now), 0), MaxRetryAfter), true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
