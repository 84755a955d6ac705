package stdoutsink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/stdoutsink"
)

func TestPublishWritesHeaders(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	s := stdoutsink.New(&buf)
	msg := testMessage(1, `{"total": 10}`)
	msg.Headers = map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"b-key":       "line\nbreak <&>",
		"a-key":       "café",
	}
	before := maps.Clone(msg.Headers)

	require.NoError(t, s.Publish(context.Background(), msg))

	// Keys sorted, headers just before the payload, the line still one line.
	require.Equal(t,
		`{"id":1,"aggregate_type":"order","aggregate_id":"42","event_type":"OrderCreated",`+
			`"created_at":"2024-03-01T10:00:00.123456Z","attempt":2,"fencing_token":7,`+
			`"headers":{"a-key":"café","b-key":"line\nbreak <&>","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},`+
			`"payload":{"total": 10}}`+"\n",
		buf.String())
	var got struct {
		Headers map[string]string `json:"headers"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &got))
	require.Equal(t, before, got.Headers)
	require.Equal(t, before, msg.Headers)
}

func TestPublishOmitsEmptyHeaders(t *testing.T) {
	t.Parallel()

	want := `{"id":1,"aggregate_type":"order","aggregate_id":"42","event_type":"OrderCreated",` +
		`"created_at":"2024-03-01T10:00:00.123456Z","attempt":2,"fencing_token":7,"payload":{}}` + "\n"
	for name, headers := range map[string]map[string]string{"Nil": nil, "Empty": {}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()

			var buf bytes.Buffer
			msg := testMessage(1, `{}`)
			msg.Headers = headers

			require.NoError(t, stdoutsink.New(&buf).Publish(context.Background(), msg))
			require.Equal(t, want, buf.String())
		})
	}
}
