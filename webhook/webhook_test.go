package webhook_test

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/webhook"
)

// The Standard Webhooks reference test vector (libraries/go/webhook_test.go,
// TestWebhookSign, in github.com/standard-webhooks/standard-webhooks),
// checked independently with openssl.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var vectorNow = time.Unix(vectorTimestamp, 0)

// base is the clock of the tests that do not need the real one.
var base = time.Unix(1_700_000_000, 0)

var sentinels = []error{
	webhook.ErrMissingHeaders,
	webhook.ErrMalformedHeaders,
	webhook.ErrInvalidSignature,
	webhook.ErrTimestampOutOfRange,
}

func randomSecret(t testing.TB, n int) string {
	t.Helper()
	key := make([]byte, n)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

func newSigner(t testing.TB, secrets ...string) *webhook.Signer {
	t.Helper()
	s, err := webhook.NewSigner(secrets...)
	require.NoError(t, err)
	return s
}

func signedHeaders(s *webhook.Signer, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	s.SetHeaders(h, id, ts, body)
	return h
}

// requireOnly checks that err matches want and no other sentinel, so a test
// cannot pass on the wrong failure.
func requireOnly(t *testing.T, err, want error) {
	t.Helper()
	require.ErrorIs(t, err, want)
	for _, other := range sentinels {
		if !errors.Is(other, want) {
			require.NotErrorIs(t, err, other)
		}
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t, 32)
	s := newSigner(t, secret)
	body := []byte(`{ "z":1, "a": "caf\u00e9 ☕" }`)

	h := signedHeaders(s, "9007199254740993", base, body)

	require.Equal(t, "9007199254740993", h.Get("webhook-id"))
	require.Equal(t, "1700000000", h.Get("webhook-timestamp"))
	require.Equal(t, s.Sign("9007199254740993", base, body), h.Get("webhook-signature"))
	require.Regexp(t, `^v1,[A-Za-z0-9+/]{43}=$`, h.Get("webhook-signature"))
	require.NoError(t, webhook.Verify([]string{secret}, h, body, 0, base))

	t.Run("EmptyBody", func(t *testing.T) {
		t.Parallel()

		h := signedHeaders(s, "1", base, nil)

		require.NoError(t, webhook.Verify([]string{secret}, h, []byte{}, 0, base))
		requireOnly(t, webhook.Verify([]string{secret}, h, []byte(" "), 0, base), webhook.ErrInvalidSignature)
	})
	t.Run("SubSecondTimestampTruncated", func(t *testing.T) {
		t.Parallel()

		ts := base.Add(999 * time.Millisecond)
		h := signedHeaders(s, "1", ts, body)

		require.Equal(t, "1700000000", h.Get("webhook-timestamp"))
		require.Equal(t, s.Sign("1", base, body), s.Sign("1", ts, body))
		require.NoError(t, webhook.Verify([]string{secret}, h, body, 0, ts))
	})
	t.Run("ZeroNowIsTheRealClock", func(t *testing.T) {
		t.Parallel()

		require.NoError(t, webhook.Verify([]string{secret}, signedHeaders(s, "1", time.Now(), body), body, 0, time.Time{}))
		requireOnly(t, webhook.Verify([]string{secret}, h, body, 0, time.Time{}), webhook.ErrTimestampOutOfRange)
	})
	t.Run("LongestKey", func(t *testing.T) {
		t.Parallel()

		secret := randomSecret(t, 64)

		require.NoError(t, webhook.Verify([]string{secret}, signedHeaders(newSigner(t, secret), "1", base, body), body, 0, base))
	})
}

func TestOfficialVector(t *testing.T) {
	t.Parallel()

	s := newSigner(t, vectorSecret)
	body := []byte(vectorBody)

	require.Equal(t, vectorSignature, s.Sign(vectorID, vectorNow, body))

	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.Itoa(vectorTimestamp))
	h.Set("webhook-signature", vectorSignature)
	require.NoError(t, webhook.Verify([]string{vectorSecret}, h, body, 0, vectorNow))

	// The reference suite's other cases: a wrong signature alone fails, and
	// the same one next to an unknown version and the right signature
	// passes.
	const wrong = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
	h.Set("webhook-signature", wrong)
	requireOnly(t, webhook.Verify([]string{vectorSecret}, h, body, 0, vectorNow), webhook.ErrInvalidSignature)
	h.Set("webhook-signature", strings.Join([]string{
		wrong, "v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=", vectorSignature, wrong,
	}, " "))
	require.NoError(t, webhook.Verify([]string{vectorSecret}, h, body, 0, vectorNow))
}

func TestRotation(t *testing.T) {
	t.Parallel()

	oldSecret, newSecret, otherSecret := randomSecret(t, 24), randomSecret(t, 32), randomSecret(t, 32)
	body := []byte(`{"n":1}`)
	both := newSigner(t, newSecret, oldSecret)

	h := signedHeaders(both, "77", base, body)

	sigs := strings.Split(h.Get("webhook-signature"), " ")
	require.Len(t, sigs, 2)
	require.Equal(t, newSigner(t, newSecret).Sign("77", base, body), sigs[0], "signatures come in the order of the secrets")
	require.Equal(t, newSigner(t, oldSecret).Sign("77", base, body), sigs[1])

	for _, tt := range []struct {
		name     string
		receiver []string
		ok       bool
	}{
		{"ReceiverStillOnOld", []string{oldSecret}, true},
		{"ReceiverAlreadyOnNew", []string{newSecret}, true},
		{"ReceiverHoldingBoth", []string{oldSecret, newSecret}, true},
		{"ReceiverWithAnUnrelatedSecretFirst", []string{otherSecret, oldSecret}, true},
		{"ReceiverWithAnUnrelatedSecret", []string{otherSecret}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := webhook.Verify(tt.receiver, h, body, 0, base)

			if tt.ok {
				require.NoError(t, err)
			} else {
				requireOnly(t, err, webhook.ErrInvalidSignature)
			}
		})
	}
	t.Run("SenderDroppedOldReceiverHoldsBoth", func(t *testing.T) {
		t.Parallel()

		h := signedHeaders(newSigner(t, newSecret), "77", base, body)

		require.NoError(t, webhook.Verify([]string{oldSecret, newSecret}, h, body, 0, base))
		requireOnly(t, webhook.Verify([]string{oldSecret}, h, body, 0, base), webhook.ErrInvalidSignature)
	})
}

func TestVerifyRejectsTampering(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t, 32)
	s := newSigner(t, secret)
	body := []byte(`{"amount":100}`)
	sig := s.Sign("42", base, body)
	flipped := []byte(sig)
	flipped[10] ^= 1 // still base64, still the right length

	tests := []struct {
		name string
		edit func(h http.Header, body []byte) []byte
	}{
		{"Body", func(h http.Header, body []byte) []byte { return []byte(`{"amount":900}`) }},
		{"BodyTrailingNewline", func(h http.Header, body []byte) []byte { return append(body, '\n') }},
		{"ID", func(h http.Header, body []byte) []byte { h.Set("webhook-id", "43"); return body }},
		{"Timestamp", func(h http.Header, body []byte) []byte {
			h.Set("webhook-timestamp", strconv.FormatInt(base.Unix()+1, 10))
			return body
		}},
		{"SignatureBitFlipped", func(h http.Header, body []byte) []byte {
			h.Set("webhook-signature", string(flipped))
			return body
		}},
		{"SignatureTruncated", func(h http.Header, body []byte) []byte {
			h.Set("webhook-signature", sig[:len(sig)-1])
			return body
		}},
		{"SignatureWithoutVersion", func(h http.Header, body []byte) []byte {
			h.Set("webhook-signature", strings.TrimPrefix(sig, "v1,"))
			return body
		}},
		{"SignatureUnderAnotherVersion", func(h http.Header, body []byte) []byte {
			h.Set("webhook-signature", "v1a"+strings.TrimPrefix(sig, "v1"))
			return body
		}},
		{"SignatureUpperCaseVersion", func(h http.Header, body []byte) []byte {
			h.Set("webhook-signature", "V1"+strings.TrimPrefix(sig, "v1"))
			return body
		}},
		{"SignatureOnlySpaces", func(h http.Header, body []byte) []byte {
			h.Set("webhook-signature", "   ")
			return body
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			h := signedHeaders(s, "42", base, body)
			got := tt.edit(h, append([]byte(nil), body...))

			requireOnly(t, webhook.Verify([]string{secret}, h, got, 0, base), webhook.ErrInvalidSignature)
		})
	}
}

func TestVerifyTimestampRange(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t, 32)
	s := newSigner(t, secret)
	body := []byte(`{}`)

	tests := []struct {
		name      string
		sentAt    time.Time
		tolerance time.Duration
		ok        bool
	}{
		{"Now", base, 0, true},
		{"DefaultToleranceOld", base.Add(-5 * time.Minute), 0, true},
		{"DefaultTolerancePlusOneSecondOld", base.Add(-5*time.Minute - time.Second), 0, false},
		{"DefaultToleranceAhead", base.Add(5 * time.Minute), 0, true},
		{"DefaultTolerancePlusOneSecondAhead", base.Add(5*time.Minute + time.Second), 0, false},
		{"NegativeToleranceIsDefault", base.Add(-4 * time.Minute), -time.Second, true},
		{"CustomTolerance", base.Add(-10 * time.Second), 10 * time.Second, true},
		{"CustomToleranceExceeded", base.Add(-11 * time.Second), 10 * time.Second, false},
		{"CustomToleranceExceededAhead", base.Add(11 * time.Second), 10 * time.Second, false},
		{"ADayOld", base.Add(-24 * time.Hour), 0, false},
		{"Epoch", time.Unix(0, 0), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			h := signedHeaders(s, "1", tt.sentAt, body)

			err := webhook.Verify([]string{secret}, h, body, tt.tolerance, base)

			if tt.ok {
				require.NoError(t, err)
			} else {
				requireOnly(t, err, webhook.ErrTimestampOutOfRange)
			}
		})
	}
	t.Run("LargestInt64", func(t *testing.T) {
		t.Parallel()

		h := signedHeaders(s, "1", base, body)
		h.Set("webhook-timestamp", "9223372036854775807")

		requireOnly(t, webhook.Verify([]string{secret}, h, body, 0, base), webhook.ErrTimestampOutOfRange)
	})
	t.Run("ReplayOfAValidRequest", func(t *testing.T) {
		t.Parallel()

		// A perfectly signed request captured an hour ago.
		h := signedHeaders(s, "1", base.Add(-time.Hour), body)

		err := webhook.Verify([]string{secret}, h, body, 0, base)

		requireOnly(t, err, webhook.ErrTimestampOutOfRange)
		require.ErrorContains(t, err, "1h0m0s ago")
	})
}

func TestVerifyMalformedHeaders(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t, 32)
	s := newSigner(t, secret)
	body := []byte(`{}`)

	tests := []struct {
		name string
		edit func(h http.Header)
		want error
		text string
	}{
		{"NoHeaders", func(h http.Header) { clear(h) }, webhook.ErrMissingHeaders, "webhook-id, webhook-timestamp, webhook-signature"},
		{"NoID", func(h http.Header) { h.Del("webhook-id") }, webhook.ErrMissingHeaders, "webhook-id"},
		{"EmptyID", func(h http.Header) { h.Set("webhook-id", "") }, webhook.ErrMissingHeaders, "webhook-id"},
		{"NoTimestamp", func(h http.Header) { h.Del("webhook-timestamp") }, webhook.ErrMissingHeaders, "webhook-timestamp"},
		{"NoSignature", func(h http.Header) { h.Del("webhook-signature") }, webhook.ErrMissingHeaders, "webhook-signature"},
		{"EmptySignature", func(h http.Header) { h.Set("webhook-signature", "") }, webhook.ErrMissingHeaders, "webhook-signature"},
		{"IDWithDot", func(h http.Header) { h.Set("webhook-id", "msg.1") }, webhook.ErrMalformedHeaders, "'.'"},
		{"IDTwice", func(h http.Header) { h.Add("webhook-id", "2") }, webhook.ErrMalformedHeaders, "webhook-id sent 2 times"},
		{"TimestampTwice", func(h http.Header) { h.Add("webhook-timestamp", "1700000000") }, webhook.ErrMalformedHeaders, "webhook-timestamp sent 2 times"},
	}
	for _, ts := range []string{
		"abc", "-1", "+1700000000", "01700000000", " 1700000000", "1700000000 ", "1700000000.5",
		"1.7e9", "0x6553F100", "99999999999999999999", "9223372036854775808", "１７００", "2023-11-14T22:13:20Z",
	} {
		tests = append(tests, struct {
			name string
			edit func(h http.Header)
			want error
			text string
		}{"Timestamp" + ts, func(h http.Header) { h.Set("webhook-timestamp", ts) }, webhook.ErrMalformedHeaders, "webhook-timestamp"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			h := signedHeaders(s, "1", base, body)
			tt.edit(h)

			err := webhook.Verify([]string{secret}, h, body, 0, base)

			requireOnly(t, err, tt.want)
			require.ErrorContains(t, err, tt.text)
		})
	}
	t.Run("LowerCaseKeysAreCanonicalized", func(t *testing.T) {
		t.Parallel()

		// What a handler sees is canonical; a map built by hand with the
		// spec's lower-case names is not found, as with http.Header.Get.
		signed := signedHeaders(s, "1", base, body)
		raw := http.Header{
			"webhook-id":        signed.Values("webhook-id"),
			"webhook-timestamp": signed.Values("webhook-timestamp"),
			"webhook-signature": signed.Values("webhook-signature"),
		}

		requireOnly(t, webhook.Verify([]string{secret}, raw, body, 0, base), webhook.ErrMissingHeaders)
	})
	t.Run("SignaturesSpreadOverSeveralHeaderLines", func(t *testing.T) {
		t.Parallel()

		h := signedHeaders(s, "1", base, body)
		good := h.Get("webhook-signature")
		h.Set("webhook-signature", "v1,bm9wZQ==")
		h.Add("webhook-signature", "v1a,whatever  "+good+"\t")

		require.NoError(t, webhook.Verify([]string{secret}, h, body, 0, base))
	})
}

func TestMalformedSecrets(t *testing.T) {
	t.Parallel()

	key16 := base64.StdEncoding.EncodeToString(make([]byte, 16))
	key65 := base64.StdEncoding.EncodeToString(make([]byte, 65))
	tests := []struct {
		name    string
		secrets []string
		want    string
	}{
		{"None", nil, "webhook: no secret given"},
		{"Empty", []string{""}, "webhook: secret is empty"},
		{"NoPrefix", []string{strings.TrimPrefix(vectorSecret, "whsec_")}, "webhook: secret does not start with whsec_"},
		{"OtherPrefix", []string{"whsk_" + strings.TrimPrefix(vectorSecret, "whsec_")}, "does not start with whsec_"},
		{"NotBase64", []string{"whsec_MfKQ9r8G!!!rTwjUPD8ILPZIo2LaLaSw"}, "webhook: secret is not standard base64 after whsec_"},
		{"URLSafeBase64", []string{"whsec_-_-_" + strings.Repeat("A", 28)}, "not standard base64"},
		{"WrongPadding", []string{"whsec_" + strings.TrimSuffix(key65, "=") + "=="}, "not standard base64"},
		{"InnerSpace", []string{"whsec_MfKQ9r8GKYqr TwjUPD8ILPZIo2LaLaSw"}, "not standard base64"},
		{"OnlyPrefix", []string{"whsec_"}, "decodes to 0 bytes; want 24 to 64"},
		{"TooShort", []string{"whsec_" + key16}, "decodes to 16 bytes; want 24 to 64"},
		{"TooLong", []string{"whsec_" + key65}, "decodes to 65 bytes; want 24 to 64"},
		{"SecondOfThree", []string{vectorSecret, "whsec_" + key16, vectorSecret}, "webhook: secret 2 of 3 decodes to 16 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			signer, err := webhook.NewSigner(tt.secrets...)
			require.Nil(t, signer)
			require.ErrorContains(t, err, tt.want)
			require.True(t, strings.HasPrefix(err.Error(), "webhook: "), "%v", err)

			verifier, verr := webhook.NewVerifier(tt.secrets...)
			require.Nil(t, verifier)
			require.Equal(t, err.Error(), verr.Error())

			// Verify reports the configuration, whatever the request.
			ferr := webhook.Verify(tt.secrets, signedHeaders(newSigner(t, vectorSecret), "1", base, nil), nil, 0, base)
			require.Equal(t, err.Error(), ferr.Error())
			for _, sentinel := range sentinels {
				require.NotErrorIs(t, ferr, sentinel)
			}
		})
	}
	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()

		key := make([]byte, 25) // base64 needs padding
		for _, secret := range []string{
			"whsec_" + base64.StdEncoding.EncodeToString(key),
			"whsec_" + base64.RawStdEncoding.EncodeToString(key),
			"whsec_" + base64.StdEncoding.EncodeToString(key) + "\n", // a secret file's newline
		} {
			s, err := webhook.NewSigner(secret)
			require.NoError(t, err, "%q", secret)
			require.Equal(t, newSigner(t, "whsec_"+base64.StdEncoding.EncodeToString(key)).Sign("1", base, nil), s.Sign("1", base, nil))
		}
	})
}

func TestSecretsNeverInErrors(t *testing.T) {
	t.Parallel()

	// Distinctive, so any echo, even of a fragment, is caught.
	const encoded = "U2VjcmV0U2VjcmV0U2VjcmV0U2VjcmV0"
	secret := "whsec_" + encoded
	key, err := base64.StdEncoding.DecodeString(encoded)
	require.NoError(t, err)
	fragments := []string{secret, encoded, encoded[:12], encoded[len(encoded)-12:], string(key), fmt.Sprint(key), fmt.Sprintf("%x", key)} //nolint:staticcheck // QF1010: fmt.Sprint(key) is the byte-list form "[1 2 ...]", a different leak than string(key)
	requireClean := func(t *testing.T, text string) {
		t.Helper()
		for _, f := range fragments {
			require.NotContains(t, text, f)
		}
	}

	s := newSigner(t, secret)
	body := []byte(`{}`)
	good := signedHeaders(s, "1", base, body)
	sig := good.Get("webhook-signature")

	var errs []error
	_, err = webhook.NewSigner(secret[:len(secret)-4])
	errs = append(errs, err)
	_, err = webhook.NewSigner(strings.Replace(secret, "U2Vj", "U2V!", 1))
	errs = append(errs, err)
	_, err = webhook.NewSigner(encoded)
	errs = append(errs, err)
	_, err = webhook.NewVerifier(secret, encoded+"x")
	errs = append(errs, err)
	errs = append(errs, webhook.Verify([]string{secret}, good, []byte(`{"x":1}`), 0, base))
	errs = append(errs, webhook.Verify([]string{secret}, good, body, 0, base.Add(time.Hour)))
	errs = append(errs, webhook.Verify([]string{randomSecret(t, 32)}, good, body, 0, base))
	errs = append(errs, webhook.Verify([]string{secret}, http.Header{}, body, 0, base))
	for _, err := range errs {
		require.Error(t, err)
		requireClean(t, err.Error())
		require.NotContains(t, err.Error(), strings.TrimPrefix(sig, "v1,"), "signatures from the request are not echoed either")
	}

	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
		requireClean(t, fmt.Sprintf(verb, s))
		requireClean(t, fmt.Sprintf(verb, v))
		requireClean(t, fmt.Sprintf(verb, struct{ S *webhook.Signer }{s}))
	}
	require.Equal(t, "webhook.Signer{1 secrets}", fmt.Sprint(s))
}

func newRequest(h http.Header, body io.Reader) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hook", body)
	for k, vs := range h {
		r.Header[k] = vs
	}
	return r
}

// countingReader records whether the verifier read the body.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

func TestVerifier(t *testing.T) {
	t.Parallel()

	oldSecret, newSecret := randomSecret(t, 32), randomSecret(t, 32)
	v, err := webhook.NewVerifier(oldSecret, newSecret)
	require.NoError(t, err)
	s := newSigner(t, newSecret)
	body := []byte(`{"order":42}`)

	t.Run("ReturnsTheBody", func(t *testing.T) {
		t.Parallel()

		got, err := v.Verify(newRequest(signedHeaders(s, "42", time.Now(), body), strings.NewReader(string(body))))

		require.NoError(t, err)
		require.Equal(t, body, got)
	})
	t.Run("TamperedBody", func(t *testing.T) {
		t.Parallel()

		got, err := v.Verify(newRequest(signedHeaders(s, "42", time.Now(), body), strings.NewReader(`{"order":43}`)))

		require.Nil(t, got)
		requireOnly(t, err, webhook.ErrInvalidSignature)
	})
	t.Run("UnsignedRequestBodyNotRead", func(t *testing.T) {
		t.Parallel()

		cr := &countingReader{r: strings.NewReader(string(body))}

		_, err := v.Verify(newRequest(http.Header{}, cr))

		requireOnly(t, err, webhook.ErrMissingHeaders)
		require.Zero(t, cr.reads)
	})
	t.Run("StaleRequestBodyNotRead", func(t *testing.T) {
		t.Parallel()

		cr := &countingReader{r: strings.NewReader(string(body))}

		_, err := v.Verify(newRequest(signedHeaders(s, "42", time.Now().Add(-time.Hour), body), cr))

		requireOnly(t, err, webhook.ErrTimestampOutOfRange)
		require.Zero(t, cr.reads)
	})
	t.Run("Tolerance", func(t *testing.T) {
		t.Parallel()

		v, err := webhook.NewVerifier(newSecret)
		require.NoError(t, err)
		v.Tolerance = time.Hour
		h := signedHeaders(s, "42", time.Now().Add(-30*time.Minute), body)

		_, err = v.Verify(newRequest(h, strings.NewReader(string(body))))

		require.NoError(t, err)
	})
	t.Run("NilBody", func(t *testing.T) {
		t.Parallel()

		r := newRequest(signedHeaders(s, "42", time.Now(), nil), nil)
		r.Body = nil

		got, err := v.Verify(r)

		require.NoError(t, err)
		require.Empty(t, got)
	})
	t.Run("ZeroVerifier", func(t *testing.T) {
		t.Parallel()

		_, err := (&webhook.Verifier{}).Verify(newRequest(signedHeaders(s, "42", time.Now(), body), strings.NewReader(string(body))))

		require.ErrorContains(t, err, "NewVerifier")
	})
}

func TestVerifierMaxBody(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t, 32)
	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	v.MaxBody = 10
	s := newSigner(t, secret)

	tests := []struct {
		name string
		body string
		// Unknown length: the limit must hold while reading, not only
		// against Content-Length.
		chunked bool
		ok      bool
	}{
		{"AtLimit", "0123456789", false, true},
		{"AtLimitChunked", "0123456789", true, true},
		{"OverLimit", "0123456789A", false, false},
		{"OverLimitChunked", "0123456789A", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			var rd io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				rd = io.MultiReader(rd) // hides the length from httptest
			}
			r := newRequest(signedHeaders(s, "1", time.Now(), []byte(tt.body)), rd)
			if tt.chunked {
				require.Equal(t, int64(-1), r.ContentLength)
			}

			got, err := v.Verify(r)

			if tt.ok {
				require.NoError(t, err)
				require.Equal(t, tt.body, string(got))
				return
			}
			var mbe *http.MaxBytesError
			require.ErrorAs(t, err, &mbe)
			require.Equal(t, int64(10), mbe.Limit)
			for _, sentinel := range sentinels {
				require.NotErrorIs(t, err, sentinel)
			}
		})
	}
	t.Run("DefaultIs10MiB", func(t *testing.T) {
		t.Parallel()

		v, err := webhook.NewVerifier(secret)
		require.NoError(t, err)
		r := newRequest(signedHeaders(s, "1", time.Now(), nil), strings.NewReader(""))
		r.ContentLength = webhook.MaxBodyDefault + 1

		_, err = v.Verify(r)

		var mbe *http.MaxBytesError
		require.ErrorAs(t, err, &mbe)
		require.Equal(t, int64(10<<20), mbe.Limit)
	})
}

func TestVerifierOverHTTP(t *testing.T) {
	t.Parallel()

	secret := randomSecret(t, 32)
	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	got := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := v.Verify(r)
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		case err != nil:
			w.WriteHeader(http.StatusUnauthorized)
		default:
			got <- body
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	post := func(t *testing.T, h http.Header, body string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		require.NoError(t, err)
		for k, vs := range h {
			req.Header[k] = vs
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	body := `{"ok":true}`

	require.Equal(t, http.StatusNoContent, post(t, signedHeaders(newSigner(t, secret), "5", time.Now(), []byte(body)), body))
	require.Equal(t, body, string(<-got))
	require.Equal(t, http.StatusUnauthorized, post(t, signedHeaders(newSigner(t, randomSecret(t, 32)), "5", time.Now(), []byte(body)), body))
	require.Equal(t, http.StatusUnauthorized, post(t, http.Header{}, body))
}

func FuzzVerify(f *testing.F) {
	f.Add(vectorID, strconv.Itoa(vectorTimestamp), vectorSignature, []byte(vectorBody))
	f.Add(vectorID, strconv.Itoa(vectorTimestamp), vectorSignature+" v1a,abc v1,", []byte(vectorBody))
	f.Add("", "", "", []byte(nil))
	f.Add("a.b", "1614265330", "v1,", []byte("x"))
	f.Add("1", "-1614265330", "v1,,,, v1 ,", []byte("x"))
	f.Add("1", "99999999999999999999999", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", []byte("\x00\xff"))
	f.Add("\n", "0", "\t\t v1,=== ", []byte{})
	s := newSigner(f, vectorSecret)

	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)

		err := webhook.Verify([]string{vectorSecret}, h, body, 0, vectorNow)

		if err != nil {
			matched := 0
			for _, sentinel := range sentinels {
				if errors.Is(err, sentinel) {
					matched++
				}
			}
			require.Equal(t, 1, matched, "every rejection is exactly one of the sentinels: %v", err)
		} else {
			// Accepted only if the header holds the signature a holder of
			// the secret would have made.
			n, perr := strconv.ParseInt(ts, 10, 64)
			require.NoError(t, perr)
			require.Contains(t, strings.Fields(sig), s.Sign(id, time.Unix(n, 0), body))
		}

		if id != "" && !strings.Contains(id, ".") {
			require.NoError(t, webhook.Verify([]string{vectorSecret}, signedHeaders(s, id, vectorNow, body), body, 0, vectorNow))
		}
	})
}
