// Package webhook signs and verifies webhooks the way the Standard Webhooks
// specification (https://www.standardwebhooks.com) defines them, so that a
// receiver can tell a delivery from outboxd apart from a forged or replayed
// request.
//
// A signed request carries three headers:
//
//   - webhook-id: the message id, which is also the deduplication key.
//   - webhook-timestamp: when the request was sent, in Unix seconds.
//   - webhook-signature: a space-separated list of "v1,<signature>", one per
//     secret, where the signature is the standard base64 of
//     HMAC-SHA256(key, "<id>.<timestamp>.<body>").
//
// Secrets are written "whsec_" followed by the standard base64 of the key,
// which must be 24 to 64 bytes long (the specification's 192 to 512 bits).
// One way to make one:
//
//	echo "whsec_$(openssl rand -base64 32)"
//
// Several secrets rotate a key without downtime: the sender signs with the
// new and the old secret at once, receivers switch to the new one at their
// own pace, then the sender drops the old one. A receiver given several
// secrets accepts a request that any of them signed.
//
// Error messages never contain a secret, nor a signature taken from a
// request.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names, in the canonical form net/http uses; the specification
// writes them in lower case, which HTTP treats as the same name.
const (
	HeaderID        = "Webhook-Id"
	HeaderSignature = "Webhook-Signature"
	HeaderTimestamp = "Webhook-Timestamp"
)

// SecretPrefix starts every secret, so a secret is recognisable wherever it
// turns up (and a scanner can flag it in a URL or a log).
const SecretPrefix = "whsec_"

// Defaults for [Verify] and [Verifier].
const (
	// MaxBodyDefault bounds the body [Verifier.Verify] reads.
	MaxBodyDefault = 10 << 20
	// ToleranceDefault is how far the webhook-timestamp may be from the
	// receiver's clock, either way.
	ToleranceDefault = 5 * time.Minute
)

// The specification asks for 192 to 512 bits of key.
const (
	minKeyBytes = 24
	maxKeyBytes = 64
)

// maxTimestampDigits is the length of the largest int64; anything longer
// overflows.
const maxTimestampDigits = 19

var (
	// ErrMissingHeaders reports that webhook-id, webhook-timestamp or
	// webhook-signature is absent or empty: the request was not signed.
	ErrMissingHeaders = errors.New("webhook: missing header")
	// ErrMalformedHeaders reports a webhook-id or webhook-timestamp that is
	// not in the form the specification defines (a timestamp that is not
	// a decimal integer, an id containing '.', a header sent twice), so no
	// signature over it can be trusted.
	ErrMalformedHeaders = errors.New("webhook: malformed header")
	// ErrInvalidSignature reports that no v1 signature in
	// webhook-signature matches the request under any of the secrets: the
	// body, id or timestamp was changed, or the secrets differ.
	ErrInvalidSignature = errors.New("webhook: invalid signature")
	// ErrTimestampOutOfRange reports a webhook-timestamp further from the
	// receiver's clock than the tolerance: a replay of an old request, or
	// clocks too far apart.
	ErrTimestampOutOfRange = errors.New("webhook: timestamp out of range")
)

// Signer signs outgoing webhooks with one or more secrets. It is safe for
// concurrent use.
type Signer struct {
	keys [][]byte
}

// NewSigner returns a Signer for secrets, each "whsec_<base64 key>". With
// several, every request carries one signature per secret, in the order
// given. The error for a malformed secret names its position, never its
// value.
func NewSigner(secrets ...string) (*Signer, error) {
	keys, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return &Signer{keys: keys}, nil
}

// Sign returns the webhook-signature value for a request with this id, sent
// at ts (truncated to the second), carrying body. id must not contain '.',
// which would make "<id>.<timestamp>.<body>" ambiguous; verifiers reject it.
func (s *Signer) Sign(id string, ts time.Time, body []byte) string {
	return s.sign(id, formatTimestamp(ts), body)
}

// SetHeaders sets webhook-id, webhook-timestamp and webhook-signature on h,
// so that the timestamp sent is the one signed.
func (s *Signer) SetHeaders(h http.Header, id string, ts time.Time, body []byte) {
	unix := formatTimestamp(ts)
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, unix)
	h.Set(HeaderSignature, s.sign(id, unix, body))
}

func (s *Signer) sign(id, unix string, body []byte) string {
	const perSig = len("v1,") + 44 + 1 // base64 of 32 bytes is 44 characters
	var b strings.Builder
	b.Grow(len(s.keys) * perSig)
	for i, key := range s.keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(signature(key, id, unix, body))
	}
	return b.String()
}

// String keeps the keys out of anything that formats a Signer.
func (s *Signer) String() string {
	return fmt.Sprintf("webhook.Signer{%d secrets}", len(s.keys))
}

// GoString is String for %#v.
func (s *Signer) GoString() string { return s.String() }

// Verify checks that the webhook made of headers and body was signed with
// one of secrets within tolerance of now. Any v1 signature in
// webhook-signature may match any secret, so a receiver can hold the old and
// the new secret while a key is rotated. tolerance zero or negative means
// [ToleranceDefault]; a zero now means time.Now().
//
// A request that fails returns an error matching (with errors.Is) one of
// [ErrMissingHeaders], [ErrMalformedHeaders], [ErrTimestampOutOfRange] or
// [ErrInvalidSignature]; a malformed secret returns an error matching none of
// them. body must be the raw bytes received: parsing and re-encoding JSON
// changes them.
func Verify(secrets []string, headers http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	keys, err := parseSecrets(secrets)
	if err != nil {
		return err
	}
	m, err := parseHeaders(headers)
	if err != nil {
		return err
	}
	if now.IsZero() {
		now = time.Now()
	}
	if err := checkTimestamp(m.ts, tolerance, now); err != nil {
		return err
	}
	return m.match(keys, body)
}

// Verifier checks incoming webhook requests for a receiver's handler. Set
// its fields, if at all, before the first Verify; it is then safe for
// concurrent use.
type Verifier struct {
	keys [][]byte
	// MaxBody is how many bytes of body Verify reads at most; a longer
	// body fails with an error wrapping *http.MaxBytesError. Defaults to
	// MaxBodyDefault (10 MiB).
	MaxBody int64
	// Tolerance is how far webhook-timestamp may be from the receiver's
	// clock, either way. Defaults to ToleranceDefault (5 minutes).
	Tolerance time.Duration
}

// NewVerifier returns a Verifier accepting requests signed with any of
// secrets, each "whsec_<base64 key>".
func NewVerifier(secrets ...string) (*Verifier, error) {
	keys, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return &Verifier{keys: keys}, nil
}

// Verify reads r's body and returns it if the request is a webhook signed
// with one of the Verifier's secrets; errors are those of [Verify], or
// reading the body. The headers are checked first, so an unsigned or stale
// request is turned away without reading its body. The body is consumed:
// use the returned bytes, not r.Body.
func (v *Verifier) Verify(r *http.Request) ([]byte, error) {
	if len(v.keys) == 0 {
		return nil, errors.New("webhook: Verifier has no secrets; build it with NewVerifier")
	}
	m, err := parseHeaders(r.Header)
	if err != nil {
		return nil, err
	}
	if err := checkTimestamp(m.ts, v.Tolerance, time.Now()); err != nil {
		return nil, err
	}
	body, err := readBody(r, v.MaxBody)
	if err != nil {
		return nil, err
	}
	if err := m.match(v.keys, body); err != nil {
		return nil, err
	}
	return body, nil
}

// String keeps the keys out of anything that formats a Verifier.
func (v *Verifier) String() string {
	return fmt.Sprintf("webhook.Verifier{%d secrets}", len(v.keys))
}

// GoString is String for %#v.
func (v *Verifier) GoString() string { return v.String() }

func readBody(r *http.Request, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = MaxBodyDefault
	}
	if r.ContentLength > limit {
		return nil, fmt.Errorf("webhook: reading body: %w", &http.MaxBytesError{Limit: limit})
	}
	if r.Body == nil {
		return []byte{}, nil
	}
	// One byte past the limit tells a body of exactly limit bytes from a
	// longer one.
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("webhook: reading body: %w", err)
	}
	if int64(len(body)) > limit {
		return nil, fmt.Errorf("webhook: reading body: %w", &http.MaxBytesError{Limit: limit})
	}
	return body, nil
}

// signedMeta is what the headers of a request claim.
type signedMeta struct {
	id string
	// unix is webhook-timestamp as received, which is what was signed; ts
	// is its value.
	unix string
	ts   int64
	// sigs are the base64 signatures of the v1 entries.
	sigs []string
}

func parseHeaders(h http.Header) (signedMeta, error) {
	ids, stamps, sigs := h.Values(HeaderID), h.Values(HeaderTimestamp), h.Values(HeaderSignature)
	var missing []string
	for _, f := range []struct {
		name   string
		values []string
	}{{"webhook-id", ids}, {"webhook-timestamp", stamps}, {"webhook-signature", sigs}} {
		if len(f.values) == 0 || f.values[0] == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return signedMeta{}, fmt.Errorf("%w: %s", ErrMissingHeaders, strings.Join(missing, ", "))
	}
	// A second webhook-id or webhook-timestamp would leave the handler and
	// the verifier free to read different ones.
	if len(ids) > 1 {
		return signedMeta{}, fmt.Errorf("%w: webhook-id sent %d times", ErrMalformedHeaders, len(ids))
	}
	if len(stamps) > 1 {
		return signedMeta{}, fmt.Errorf("%w: webhook-timestamp sent %d times", ErrMalformedHeaders, len(stamps))
	}
	m := signedMeta{id: ids[0], unix: stamps[0]}
	// With a '.' in the id, "<id>.<timestamp>.<body>" can be split in more
	// than one way, and a signature over one split would vouch for another.
	if strings.Contains(m.id, ".") {
		return signedMeta{}, fmt.Errorf("%w: webhook-id contains '.'", ErrMalformedHeaders)
	}
	ts, ok := parseTimestamp(m.unix)
	if !ok {
		return signedMeta{}, fmt.Errorf("%w: webhook-timestamp is not Unix seconds in decimal", ErrMalformedHeaders)
	}
	m.ts = ts
	for _, v := range sigs {
		for _, entry := range strings.Fields(v) {
			// Other versions (v1a is ed25519) are skipped, as the
			// specification has receivers do with schemes they do not
			// use.
			if sig, ok := strings.CutPrefix(entry, "v1,"); ok {
				m.sigs = append(m.sigs, sig)
			}
		}
	}
	return m, nil
}

// parseTimestamp accepts only the canonical decimal form (no sign, no
// leading zero, no spaces), so the text that was signed and the number that
// is checked cannot disagree.
func parseTimestamp(s string) (int64, bool) {
	if s == "" || len(s) > maxTimestampDigits || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	return ts, err == nil
}

func checkTimestamp(ts int64, tolerance time.Duration, now time.Time) error {
	if tolerance <= 0 {
		tolerance = ToleranceDefault
	}
	// Sub saturates, so an absurd timestamp cannot wrap into range.
	age := now.Sub(time.Unix(ts, 0))
	switch {
	case age > tolerance:
		return fmt.Errorf("%w: sent %s ago, tolerance %s", ErrTimestampOutOfRange, age.Truncate(time.Second), tolerance)
	case age < -tolerance:
		return fmt.Errorf("%w: sent %s in the future, tolerance %s", ErrTimestampOutOfRange, (-age).Truncate(time.Second), tolerance)
	}
	return nil
}

func (m *signedMeta) match(keys [][]byte, body []byte) error {
	if len(m.sigs) == 0 {
		return fmt.Errorf("%w: webhook-signature holds no v1 signature", ErrInvalidSignature)
	}
	for _, key := range keys {
		want := []byte(signature(key, m.id, m.unix, body))
		for _, sig := range m.sigs {
			// Constant time, so response timing does not reveal how much
			// of a guessed signature is right.
			if hmac.Equal([]byte(sig), want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: none of %d v1 signatures matches any of %d secrets", ErrInvalidSignature, len(m.sigs), len(keys))
}

// signature is the base64 HMAC-SHA256 of "<id>.<unix>.<body>", written
// piecewise so the body is not copied.
func signature(key []byte, id, unix string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	writeString(mac, id)
	writeString(mac, ".")
	writeString(mac, unix)
	writeString(mac, ".")
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

func writeString(h hash.Hash, s string) { _, _ = io.WriteString(h, s) }

func formatTimestamp(ts time.Time) string { return strconv.FormatInt(ts.Unix(), 10) }

func parseSecrets(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook: no secret given")
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		key, err := parseSecret(s)
		if err != nil {
			if len(secrets) == 1 {
				return nil, fmt.Errorf("webhook: secret %w", err)
			}
			return nil, fmt.Errorf("webhook: secret %d of %d %w", i+1, len(secrets), err)
		}
		keys[i] = key
	}
	return keys, nil
}

// parseSecret decodes "whsec_<base64>". Its error is a phrase about the
// secret that never quotes it, not even in part: base64's own error is
// dropped, as its offset says where a typo is.
func parseSecret(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("is empty")
	}
	enc, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, errors.New("does not start with " + SecretPrefix + "; want whsec_ followed by the base64 key")
	}
	// Padding is optional: some tools drop it.
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil && !strings.HasSuffix(enc, "=") {
		key, err = base64.RawStdEncoding.DecodeString(enc)
	}
	if err != nil {
		return nil, errors.New("is not standard base64 after " + SecretPrefix)
	}
	if len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return nil, fmt.Errorf("decodes to %d bytes; want %d to %d", len(key), minKeyBytes, maxKeyBytes)
	}
	return key, nil
}
