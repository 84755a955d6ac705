package webhook_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/outboxd/outbox/webhook"
)

// A sender signs each request; this is the specification's own test vector.
func ExampleSigner() {
	signer, err := webhook.NewSigner("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		log.Fatal(err)
	}
	sig := signer.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	fmt.Println(sig)
	// Output: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
}

// A receiver verifies each request before trusting its body. Holding the
// old and the new secret lets it follow a key rotation without downtime.
func ExampleVerifier() {
	const (
		oldSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		newSecret = "whsec_ZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXp7fH1+f4CB"
	)
	verifier, err := webhook.NewVerifier(newSecret, oldSecret)
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := verifier.Verify(r)
		if err != nil {
			// err names the reason (webhook.ErrInvalidSignature,
			// webhook.ErrTimestampOutOfRange...) for the log.
			http.Error(w, "invalid webhook", http.StatusUnauthorized)
			return
		}
		// webhook-id is the deduplication key.
		fmt.Printf("received %s: %s\n", r.Header.Get(webhook.HeaderID), body)
	}))
	defer srv.Close()

	post := func(signer *webhook.Signer, body string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		signer.SetHeaders(req.Header, "42", time.Now(), []byte(body))
		resp, err := srv.Client().Do(req)
		if err != nil {
			log.Fatal(err)
		}
		_ = resp.Body.Close()
		fmt.Println(resp.Status)
	}

	// outboxd still signing with the old secret only.
	oldSigner, err := webhook.NewSigner(oldSecret)
	if err != nil {
		log.Fatal(err)
	}
	post(oldSigner, `{"total":10}`)

	// A forger who does not hold a secret.
	forger, err := webhook.NewSigner("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	if err != nil {
		log.Fatal(err)
	}
	post(forger, `{"total":0}`)
	// Output:
	// received 42: {"total":10}
	// 200 OK
	// 401 Unauthorized
}

// Verify suits code that has the headers and body already, such as a
// framework handler or a message pulled from a queue.
func ExampleVerify() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	headers := http.Header{}
	headers.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	headers.Set("webhook-timestamp", "1614265330")
	headers.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	body := []byte(`{"test": 2432232314}`)

	// The request was signed at 1614265330; a minute later it is fresh, a
	// day later it is a replay.
	sentAt := time.Unix(1614265330, 0)
	fmt.Println(webhook.Verify([]string{secret}, headers, body, 0, sentAt.Add(time.Minute)))
	fmt.Println(webhook.Verify([]string{secret}, headers, body, 0, sentAt.Add(24*time.Hour)))
	// Output:
	// <nil>
	// webhook: timestamp out of range: sent 24h0m0s ago, tolerance 5m0s
}
