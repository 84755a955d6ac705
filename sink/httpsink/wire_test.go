package httpsink_test

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/httpsink"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden request files in testdata")

// rawServer answers every request on a keep-alive connection with 204 and
// hands over each request's bytes exactly as they arrived.
func rawServer(t *testing.T) (addr string, requests <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan []byte, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go serveRaw(conn, ch)
		}
	}()
	return ln.Addr().String(), ch
}

func serveRaw(conn net.Conn, ch chan<- []byte) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	for {
		var req bytes.Buffer
		length := 0
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			req.WriteString(line)
			if name, value, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Content-Length") {
				length, _ = strconv.Atoi(strings.TrimSpace(value))
			}
			if line == "\r\n" {
				break
			}
		}
		if _, err := io.CopyN(&req, r, int64(length)); err != nil {
			return
		}
		ch <- req.Bytes()
		if _, err := io.WriteString(conn, "HTTP/1.1 204 No Content\r\n\r\n"); err != nil {
			return
		}
	}
}

// unsignedParts replaces what changes with the time of sending.
var unsignedParts = regexp.MustCompile(`(?m)^(Webhook-Timestamp|Webhook-Signature): .*\r$`)

// TestPublishWireFormat pins the bytes of the requests the sink sends, so
// that a change to how they are built cannot change what receivers see.
// Regenerate with go test -run TestPublishWireFormat -update after a
// deliberate change.
func TestPublishWireFormat(t *testing.T) {
	t.Parallel()

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	tests := []struct {
		name string
		opts *httpsink.Options
		user string
		msg  func() *outbox.Message
	}{
		{
			name: "Plain",
			msg:  func() *outbox.Message { return testMessage(1) },
		},
		{
			name: "Everything",
			user: "alice:s3cret@",
			opts: &httpsink.Options{
				Headers: http.Header{"X-Tenant": {"acme"}, "x-multi": {"a", "b"}},
				Secrets: []string{secret},
			},
			msg: func() *outbox.Message {
				m := testMessage(9007199254740993)
				m.AggregateType = "shop order"
				m.AggregateID = "ä\"%42"
				m.EventType = "Order\tCreated"
				m.Payload = []byte(`{"total": 10, "note": "ünïcode"}`)
				m.CreatedAt = time.Date(2024, 3, 1, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
				m.Attempt = 12
				m.FencingToken = -3
				m.Headers = map[string]string{
					"traceparent":        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
					"X-Tenant":           "forged",
					"ce-type":            "forged",
					"bad name":           "x",
					"X-Bad-Value":        "a\nb",
					outbox.ReplayHeader:  "fix-2024",
					"x-correlation-id":   "c-1",
					"Authorization":      "forged",
					"Idempotency-Key":    "forged",
					"Webhook-Signature":  "forged",
					"Content-Length":     "1",
					"X-Empty":            "",
					"X-Forwarded-Prefix": "/a",
				}
				return m
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			addr, requests := rawServer(t)
			s := newSink(t, "http://"+tt.user+addr+"/hook?k=v", tt.opts)
			// Twice: the second request goes over the kept-alive connection
			// and must be identical.
			for range 2 {
				require.NoError(t, publish(t, s, tt.msg()))
			}
			normalise := func(b []byte) string {
				s := strings.ReplaceAll(string(b), addr, "HOST")
				return unsignedParts.ReplaceAllString(s, "$1: (varies)\r")
			}
			got, second := normalise(<-requests), normalise(<-requests)
			require.Equal(t, got, second)

			golden := filepath.Join("testdata", "wire", tt.name+".txt")
			if *updateGolden {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err)
			require.Equal(t, string(want), got)
		})
	}
}
