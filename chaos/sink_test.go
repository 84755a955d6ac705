//go:build chaos

package chaos

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Answers the recording sink gives to a request it processed.
const (
	answerOK      = "ok"      // 2xx written to the connection
	answerDropped = "dropped" // processed, then the connection was closed unanswered
	answerHang    = "hang"    // processed, answered only after the publish timeout
	answerLost    = "lost"    // processed, but writing the 2xx failed
)

// delivery is one request the sink processed (accepted the message). A
// request the sink refused (5xx, 429, 425) is not a delivery.
type delivery struct {
	Seq   int64  `json:"seq"`
	Group string `json:"group"`
	Path  string `json:"path_owner"` // owner named in the URL path
	ID    int64  `json:"id"`
	// Key is the identity the sink sent (Idempotency-Key, Nats-Msg-Id).
	Key      string    `json:"key"`
	Token    int64     `json:"token"`
	Attempt  int       `json:"attempt"`
	Received time.Time `json:"received"`
	Acked    time.Time `json:"acked,omitzero"` // when the 2xx was written (answer ok)
	Answer   string    `json:"answer"`
	Agg      string    `json:"agg"`
	// EventType and body are checked against the producer's log.
	EventType string `json:"event_type"`
	body      []byte
}

// sinkFaults is what the sink does to requests while a fault is on; each
// probability is drawn per request.
type sinkFaults struct {
	p5xx, p429, p425, pHang, pDrop float64
	// pBadText answers 500 or 503 with a body of arbitrary bytes.
	pBadText float64
	// pReject answers 422 (a permanent refusal of the message) to requests
	// of the recorder's rejectGroups.
	pReject float64
	// authCode, when set, answers every request 401 or 403 (a rotated
	// credential); authSlot limits it to one slot's incarnations.
	authCode int
	authSlot string
	// delay holds every request this long before answering (a slow
	// receiver), so batches are in flight when a signal arrives.
	delay time.Duration
	// delayOwner limits delay to one owner (empty: everyone), delayAgg
	// to one aggregate.
	delayOwner string
	delayAgg   string
}

// refusal is a request the sink refused permanently (an injected 422):
// the message may end dead for it.
type refusal struct {
	Group, Owner string
	ID, Token    int64
	Code         int
}

// recorder is the receiving end: an HTTP server that logs every delivery
// and injects receiver faults.
type recorder struct {
	srv     *http.Server
	ln      net.Listener
	hangFor time.Duration
	// rejectGroups are the tables whose messages a 422 may hit (never an
	// ordered one: a dead head blocks its aggregate for good).
	rejectGroups map[string]bool
	// namespaced are the slots whose processes relay through pipelines:
	// their identities carry the pipeline's name ("u:UID"), taken off
	// here so the checker compares the identity itself.
	namespaced map[string]bool

	mu         sync.Mutex
	rng        *rand.Rand
	faults     sinkFaults
	deliveries []delivery
	refused    map[string]int
	rejected   []refusal
	seq        int64
	wg         sync.WaitGroup
}

func newRecorder(seed uint64, hangFor time.Duration) (*recorder, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &recorder{ln: ln, hangFor: hangFor, rng: rand.New(rand.NewPCG(seed, 77)), refused: map[string]int{}}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *recorder) Addr() string { return r.ln.Addr().String() }

func (r *recorder) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if r.srv.Shutdown(ctx) != nil {
		_ = r.srv.Close()
	}
	r.wg.Wait()
}

func (r *recorder) setFaults(f sinkFaults) {
	r.mu.Lock()
	r.faults = f
	r.mu.Unlock()
}

func (r *recorder) updateFaults(fn func(*sinkFaults)) {
	r.mu.Lock()
	fn(&r.faults)
	r.mu.Unlock()
}

// snapshot returns the deliveries so far.
func (r *recorder) snapshot() ([]delivery, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	refused := make(map[string]int, len(r.refused))
	for k, v := range r.refused {
		refused[k] = v
	}
	return append([]delivery(nil), r.deliveries...), refused
}

// rejections returns the permanent refusals so far.
func (r *recorder) rejections() []refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]refusal(nil), r.rejected...)
}

// countBy returns how many deliveries the owner's requests made.
func (r *recorder) countBy(owner string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, d := range r.deliveries {
		if d.Path == owner {
			n++
		}
	}
	return n
}

func (r *recorder) record(d delivery) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	d.Seq = r.seq
	r.deliveries = append(r.deliveries, d)
	return len(r.deliveries) - 1
}

func (r *recorder) answer(i int, answer string, acked time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deliveries[i].Answer = answer
	r.deliveries[i].Acked = acked
}

// ServeHTTP handles POST /deliver/GROUP/OWNER.
func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if len(parts) != 3 || parts[0] != "deliver" {
		http.Error(w, "bad path", http.StatusNotFound)
		return
	}
	group, owner := parts[1], parts[2]
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the client went away mid-request: nothing was processed
	}
	id, _ := strconv.ParseInt(req.Header.Get("Outbox-Row-Id"), 10, 64)
	key := req.Header.Get("Idempotency-Key")
	token, _ := strconv.ParseInt(req.Header.Get("Outbox-Fencing-Token"), 10, 64)
	attempt, _ := strconv.Atoi(req.Header.Get("Outbox-Attempt"))
	agg, eventType := req.Header.Get("Ce-Subject"), req.Header.Get("Ce-Type")

	slotName, _, _ := strings.Cut(owner, "-")
	if r.namespaced[slotName] {
		if k, ok := strings.CutPrefix(key, group+":"); ok {
			key = k
		}
	}
	r.mu.Lock()
	f := r.faults
	draw := func(p float64) bool { return p > 0 && r.rng.Float64() < p }
	refuse := ""
	var badBody []byte
	switch {
	case f.authCode != 0 && (f.authSlot == "" || f.authSlot == slotName):
		refuse = strconv.Itoa(f.authCode)
	case r.rejectGroups[group] && draw(f.pReject):
		refuse = "422"
		r.rejected = append(r.rejected, refusal{Group: group, Owner: owner, ID: id, Token: token, Code: 422})
	case draw(f.pBadText):
		refuse = "500"
		if r.rng.IntN(2) == 0 {
			refuse = "503"
		}
		badBody = badText(r.rng)
	case draw(f.p5xx):
		refuse = "503"
	case draw(f.p429):
		refuse = "429"
	case draw(f.p425):
		refuse = "425"
	}
	hang := refuse == "" && draw(f.pHang)
	drop := refuse == "" && !hang && draw(f.pDrop)
	if refuse != "" {
		r.refused[refuse]++
	}
	r.mu.Unlock()

	switch {
	case badBody != nil:
		code, _ := strconv.Atoi(refuse)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = w.Write(badBody)
		return
	}
	switch refuse {
	case "401":
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		http.Error(w, "injected: credential rotated", http.StatusUnauthorized)
		return
	case "403":
		http.Error(w, "injected: credential revoked", http.StatusForbidden)
		return
	case "422":
		http.Error(w, "injected: message rejected", http.StatusUnprocessableEntity)
		return
	case "503":
		http.Error(w, "injected outage", http.StatusServiceUnavailable)
		return
	case "429":
		w.Header().Set("Retry-After", "1")
		http.Error(w, "injected rate limit", http.StatusTooManyRequests)
		return
	case "425":
		w.Header().Set("Retry-After", "0")
		http.Error(w, "injected too early", http.StatusTooEarly)
		return
	}

	d := delivery{Group: group, Path: owner, ID: id, Key: key, Token: token, Attempt: attempt, Received: time.Now(),
		Agg: agg, EventType: eventType, body: body}
	switch {
	case hang:
		d.Answer = answerHang
		r.record(d)
		t := time.NewTimer(r.hangFor)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
		}
		w.WriteHeader(http.StatusOK) // to a client that has given up
		return
	case drop:
		d.Answer = answerDropped
		r.record(d)
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				_ = c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	i := r.record(d)
	if f.delay > 0 && (f.delayOwner == "" || f.delayOwner == owner) && (f.delayAgg == "" || f.delayAgg == agg) {
		t := time.NewTimer(f.delay)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
		}
	}
	w.WriteHeader(http.StatusNoContent)
	werr := http.NewResponseController(w).Flush()
	if werr != nil || req.Context().Err() != nil {
		r.answer(i, answerLost, time.Time{})
		return
	}
	r.answer(i, answerOK, time.Now())
}

// badText draws a reply body such as a broken receiver sends: NUL bytes,
// invalid UTF-8, control characters, sometimes 64 KiB or more.
func badText(rng *rand.Rand) []byte {
	pieces := []string{"\x00", "\xff\xfe", "\xc3\x28", "\xed\xa0\x80", "\x1b[31m", "\r\n", "'\"\\", "%s%!d", "\u2028", "\x7f"}
	var b []byte
	for range 1 + rng.IntN(12) {
		b = append(b, pieces[rng.IntN(len(pieces))]...)
	}
	if rng.IntN(3) == 0 {
		b = append(b, strings.Repeat("x\x00", 32<<10+rng.IntN(32<<10))...)
	}
	return b
}

// payloadDoc is what producers put in each payload: its own digest lets the
// receiver detect any corruption on the way.
type payloadDoc struct {
	Producer int    `json:"p"`
	N        int64  `json:"n"`
	Agg      string `json:"agg"`
	Blob     string `json:"blob"`
	Sum      string `json:"sum"`
}

func payloadSum(p int, n int64, agg, blob string) string {
	h := sha256.Sum256([]byte(strconv.Itoa(p) + "|" + strconv.FormatInt(n, 10) + "|" + agg + "|" + blob))
	return hex.EncodeToString(h[:8])
}

func decodePayload(b []byte) (payloadDoc, bool) {
	var d payloadDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return d, false
	}
	return d, d.Sum == payloadSum(d.Producer, d.N, d.Agg, d.Blob)
}
