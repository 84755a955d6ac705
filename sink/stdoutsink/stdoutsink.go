// Package stdoutsink writes outbox messages as JSON lines, one per message,
// to an io.Writer (standard output in the CLI): for piping into jq or
// another process, and for trying the relay without a broker.
//
// A line looks like
//
//	{"id":1,"key":"0b9d6c1e-4f7a-4c35-9a53-8f0c2f1d7e21","aggregate_type":"order","aggregate_id":"42","event_type":"OrderCreated","created_at":"2024-03-01T10:00:00.123456Z","attempt":1,"fencing_token":1,"payload":{"total": 10}}
//
// where id is the row id and key the message's identity, the key to
// deduplicate on ([outbox.Message.IDString]; left out for a row from before
// the uid column that is sent under its id alone).
// with the payload embedded as it is stored, not re-encoded. A message with
// producer headers ([outbox.Message.Headers]) also has a "headers" object,
// keys sorted, just before the payload:
//
//	{"id":2,...,"fencing_token":1,"headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},"payload":{}}
package stdoutsink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/outboxd/outbox"
)

// Sink is an [outbox.Sink] writing JSON lines. It is safe for concurrent
// use: every line goes out in a single Write under one mutex, so lines
// from concurrent publishes never interleave.
type Sink struct {
	mu sync.Mutex
	w  io.Writer
}

var _ outbox.Sink = (*Sink)(nil)

// New returns a Sink writing to w. The sink does not buffer; if w does (a
// *bufio.Writer, or anything with a Flush() error method), Close flushes it.
// w is never closed: the caller owns it.
func New(w io.Writer) *Sink { return &Sink{w: w} }

// line is the fixed part of a line, in output order; the payload is
// appended by hand because encoding/json would compact and HTML-escape a
// json.RawMessage.
type line struct {
	ID int64 `json:"id"`
	// Key is the identity as the other sinks send it (the uid, qualified
	// as "orders:UID" with an IDNamespace); left out when that is the bare
	// id (a row from before the uid column, no namespace).
	Key           string `json:"key,omitempty"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	EventType     string `json:"event_type"`
	CreatedAt     string `json:"created_at"`
	Attempt       int    `json:"attempt"`
	FencingToken  int64  `json:"fencing_token"`
	// Headers is left out when empty, so lines of messages without
	// headers keep their shape.
	Headers map[string]string `json:"headers,omitempty"`
}

// Publish writes msg as one line. A payload that is not valid JSON is a
// permanent error, since no number of retries would make the line valid; a
// write error is retryable.
func (s *Sink) Publish(ctx context.Context, msg *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return outbox.Retryable(err)
	}
	b, err := encode(msg)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("stdoutsink: message %d: %w", msg.ID, err))
	}
	s.mu.Lock()
	_, err = s.w.Write(b)
	s.mu.Unlock()
	if err != nil {
		return outbox.Retryable(fmt.Errorf("stdoutsink: writing message %d: %w", msg.ID, err))
	}
	return nil
}

func encode(msg *outbox.Message) ([]byte, error) {
	payload := []byte(msg.Payload)
	switch {
	case len(payload) == 0:
		payload = []byte("null")
	case !json.Valid(payload):
		return nil, errors.New("payload is not valid JSON")
	case bytes.ContainsAny(payload, "\r\n"):
		// Raw line breaks can only be insignificant whitespace in valid
		// JSON (inside strings they are escaped), and they would split
		// the line; dropping them is the one change made to the payload.
		var buf bytes.Buffer
		if err := json.Compact(&buf, payload); err != nil {
			return nil, err
		}
		payload = buf.Bytes()
	}
	var buf bytes.Buffer
	buf.Grow(256 + len(payload))
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(line{
		ID:            msg.ID,
		Key:           key(msg),
		AggregateType: msg.AggregateType,
		AggregateID:   msg.AggregateID,
		EventType:     msg.EventType,
		CreatedAt:     msg.CreatedAt.UTC().Format(time.RFC3339Nano),
		Attempt:       msg.Attempt,
		FencingToken:  msg.FencingToken,
		Headers:       msg.Headers,
	})
	if err != nil {
		return nil, err
	}
	// Encode wrote `{...}\n`: reopen the object to add the payload.
	buf.Truncate(buf.Len() - len("}\n"))
	buf.WriteString(`,"payload":`)
	buf.Write(payload)
	buf.WriteString("}\n")
	return buf.Bytes(), nil
}

// Close flushes w if it buffers. Call it once, after the last Publish.
func (s *Sink) Close() error {
	f, ok := s.w.(interface{ Flush() error })
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := f.Flush(); err != nil {
		return fmt.Errorf("stdoutsink: flushing: %w", err)
	}
	return nil
}

// key is the identity sinks send, or "" when that is the bare id.
func key(msg *outbox.Message) string {
	if msg.UID == "" && msg.IDNamespace == "" {
		return ""
	}
	return msg.IDString()
}
