package sinkutil_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

func TestTemplate(t *testing.T) {
	t.Parallel()
	m := &outbox.Message{AggregateType: "order", EventType: "OrderPaid", AggregateID: "42"}
	for _, tt := range []struct{ in, want string }{
		{"outbox.{aggregate_type}.{event_type}", "outbox.order.OrderPaid"},
		{"fixed", "fixed"},
		{"{aggregate_id}", "42"},
		{"", ""},
	} {
		tpl, err := sinkutil.ParseTemplate(tt.in)
		require.NoError(t, err)
		require.Equal(t, tt.want, tpl.Expand(m, nil))
		require.Equal(t, tt.in, tpl.String())
	}
	for _, bad := range []string{"a.{nope}", "a.{event_type", "{}"} {
		_, err := sinkutil.ParseTemplate(bad)
		require.Error(t, err, bad)
	}
	tpl, _ := sinkutil.ParseTemplate("x.{aggregate_id}")
	require.Equal(t, "x.4_2", tpl.Expand(&outbox.Message{AggregateID: "4.2"}, func(s string) string {
		if s == "4.2" {
			return "4_2"
		}
		return s
	}))
	require.False(t, tpl.Fixed())
}

func TestHeadersPassProducerHeaders(t *testing.T) {
	t.Parallel()
	m := &outbox.Message{ID: 7, UID: "0b9d6c1e-4f7a-4c35-9a53-8f0c2f1d7e21", EventType: "E", Headers: map[string]string{
		"traceparent": "00-abc-def-01", "x-b": "2", "OUTBOX-ID": "forged", "Nats-Msg-Id": "forged", "": "x",
	}}
	hs := sinkutil.Reserved{Prefixes: []string{"Nats-"}}.Headers(m)
	require.Equal(t, sinkutil.Header{Key: sinkutil.HeaderID, Value: "0b9d6c1e-4f7a-4c35-9a53-8f0c2f1d7e21"}, hs[0], "the identity, not the row id")
	require.Equal(t, sinkutil.Header{Key: sinkutil.HeaderRowID, Value: "7"}, hs[1])
	require.Equal(t, []sinkutil.Header{{Key: "traceparent", Value: "00-abc-def-01"}, {Key: "x-b", Value: "2"}}, hs[8:],
		"producer headers follow the sink's own, sorted, and never replace them")
	require.Len(t, sinkutil.Reserved{}.Headers(&outbox.Message{}), 8)
	require.Equal(t, []string{"", "Nats-Msg-Id", "OUTBOX-ID"}, m.DroppedHeaders(), "the headers left out are reported")
}

func TestHeadersReserveOnlyTheCallersPrefixes(t *testing.T) {
	t.Parallel()
	m := &outbox.Message{ID: 7, Headers: map[string]string{
		"Nats-Trace": "t", "nats-msg-id": "n", "outbox-attempt": "forged", "Kafka-X": "k",
	}}
	require.Equal(t, []sinkutil.Header{{Key: "Kafka-X", Value: "k"}, {Key: "Nats-Trace", Value: "t"}, {Key: "nats-msg-id", Value: "n"}},
		sinkutil.Reserved{}.Headers(m)[8:], "with no reserved prefixes only Outbox-* is the sink's own")
	require.Equal(t, []sinkutil.Header{{Key: "Kafka-X", Value: "k"}}, sinkutil.Reserved{Prefixes: []string{"Nats-"}}.Headers(m)[8:],
		"a reserved prefix matches in any case")
	require.Equal(t, []sinkutil.Header{{Key: "Nats-Trace", Value: "t"}, {Key: "nats-msg-id", Value: "n"}},
		sinkutil.Reserved{Prefixes: []string{"kafka-", ""}}.Headers(m)[8:], "an empty prefix reserves nothing more")
}

func TestScrub(t *testing.T) {
	t.Parallel()
	raw := "amqp://user:s3cret@host:5672/%zz"
	require.Equal(t, "bad user:xxxxx here, xxxxx", sinkutil.Scrub("bad user:s3cret here, s3cret", raw))
	require.Equal(t, "untouched", sinkutil.Scrub("untouched", "amqp://host/x"))
	_, err := url.Parse(raw) //nolint:staticcheck // SA1007: the URL is invalid on purpose
	require.Error(t, err)
	require.NotContains(t, sinkutil.ParseErrText(err), "s3cret")
	require.Equal(t, "connecting as xxxxx failed", sinkutil.Scrub("connecting as TOKEN42 failed", "nats://TOKEN42@host"),
		"a lone user part is a token")
	require.Equal(t, "token xxxxx refused", sinkutil.Scrub("token tok%en refused", "http://h/x?token=tok%25en"),
		"secret query values go too, percent-decoded")
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tt := range [][2]string{
		{"nats://TOKEN@127.0.0.1:4222?subject=x", "nats://xxxxx@127.0.0.1:4222?subject=x"},
		{"amqp://guest:s3cret@h/vh?routing_key=a", "amqp://xxxxx@h/vh?routing_key=a"},
		{"redis://:s3cret@h/0", "redis://xxxxx@h/0"},
		{"http://h/hook?a=1&token=s3cret&Password=x&b=2", "http://h/hook?a=1&token=xxxxx&Password=xxxxx&b=2"},
		{"stdout:", "stdout:"},
		{"", ""},
		{"nats://u:p/w@h", sinkutil.UnparseableURL},
		{"http://u:s3cret@[::1/x", sinkutil.UnparseableURL},
	} {
		require.Equal(t, tt[1], sinkutil.RedactURL(tt[0]), tt[0])
	}
}

func TestParseErrTextDropsTheValue(t *testing.T) {
	t.Parallel()
	// The "port" url.Parse complains about is the start of the password.
	_, err := url.Parse("nats://u:pw/rest@h") //nolint:staticcheck // SA1007: invalid on purpose
	require.Error(t, err)
	require.Equal(t, "invalid port after host", sinkutil.ParseErrText(err))
	_, err = url.Parse("http://h/%zzsecret") //nolint:staticcheck // SA1007: invalid on purpose
	require.Equal(t, "invalid URL escape", sinkutil.ParseErrText(err))
	require.Equal(t, `missing "=" after in connection info string`,
		sinkutil.DropQuoted(`missing "=" after "password s3cret" in connection info string`), "a one-character quote stays")
	require.Equal(t, `bad "\\" and`, sinkutil.DropQuoted(`bad "\\" and "x\"y"`))
	require.Equal(t, `unterminated "abc`, sinkutil.DropQuoted(`unterminated "abc`))
}

func TestHeadersMarkAReplay(t *testing.T) {
	t.Parallel()
	m := &outbox.Message{ID: 7, Headers: map[string]string{outbox.ReplayHeader: "fix-1", "traceparent": "00-1"}}
	hs := sinkutil.Reserved{}.Headers(m)
	require.Equal(t, []sinkutil.Header{{Key: sinkutil.HeaderReplay, Value: "fix-1"}, {Key: "traceparent", Value: "00-1"}}, hs[8:],
		"the replay marker follows the sink's own headers, once")
	require.Equal(t, "7/replay/fix-1", m.DedupeKey())
	require.Equal(t, "7", (&outbox.Message{ID: 7}).DedupeKey())
}

func TestShownUserinfo(t *testing.T) {
	require.Equal(t, "", sinkutil.ShownUserinfo(nil))
	require.Equal(t, "app:xxxxx@", sinkutil.ShownUserinfo(url.UserPassword("app", "s3cret")))
	require.Equal(t, "xxxxx@", sinkutil.ShownUserinfo(url.User("TOKEN123")), "a lone user part may be a token")
}
