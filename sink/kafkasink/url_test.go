package kafkasink_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/kafkasink"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	defaults := kafkasink.Config{
		ClientID:    kafkasink.ClientIDDefault,
		Linger:      kafkasink.LingerDefault,
		MaxBuffered: kafkasink.MaxBufferedDefault,
		Timeout:     kafkasink.TimeoutDefault,
		Topic:       kafkasink.TopicDefault,
	}
	with := func(f func(c *kafkasink.Config)) kafkasink.Config {
		c := defaults
		f(&c)
		return c
	}
	tests := []struct {
		name string
		url  string
		want kafkasink.Config
	}{
		{"MinimalTakesDefaults", "kafka://localhost:9092", with(func(c *kafkasink.Config) { c.Seeds = []string{"localhost:9092"} })},
		{"TrailingSlash", "kafka://h:1/?topic=t", with(func(c *kafkasink.Config) { c.Seeds = []string{"h:1"}; c.Topic = "t" })},
		{"UpperCaseScheme", "KAFKA://h:1", with(func(c *kafkasink.Config) { c.Seeds = []string{"h:1"} })},
		{"SeveralBrokersDefaultPortAndIPv6", "kafka://a:1,b,[::1]:3,[fe80::1]", with(func(c *kafkasink.Config) {
			c.Seeds = []string{"a:1", "b:9092", "[::1]:3", "[fe80::1]:9092"}
		})},
		{"AllOptions", "kafka://h:1?topic=outbox.{aggregate_type}.{event_type}&create_topics=true&linger=5ms&max_buffered=500&timeout=2s&acks=all&client_id=me&tls=true", with(func(c *kafkasink.Config) {
			c.Seeds = []string{"h:1"}
			c.Topic = "outbox.{aggregate_type}.{event_type}"
			c.CreateTopics = true
			c.Linger = 5 * time.Millisecond
			c.MaxBuffered = 500
			c.Timeout = 2 * time.Second
			c.ClientID = "me"
			c.TLS = true
		})},
		{"AcksMinusOne", "kafka://h:1?acks=-1", with(func(c *kafkasink.Config) { c.Seeds = []string{"h:1"} })},
		{"LingerZeroIsAccepted", "kafka://h:1?linger=0s", with(func(c *kafkasink.Config) { c.Seeds = []string{"h:1"}; c.Linger = 0 })},
		{"SASLScramEscapedPassword", "kafka://svc%40corp:p%40ss%3Aw0rd@h:1?sasl=SCRAM-SHA-512", with(func(c *kafkasink.Config) {
			c.Seeds = []string{"h:1"}
			c.User = "svc@corp"
			c.Password = "p@ss:w0rd"
			c.SASL = "scram-sha-512"
		})},
		{"SASLPlain", "kafka://u:p@h:1?sasl=plain", with(func(c *kafkasink.Config) {
			c.Seeds = []string{"h:1"}
			c.User, c.Password, c.SASL = "u", "p", "plain"
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := kafkasink.ParseURL(tt.url)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.NoError(t, kafkasink.CheckURL(tt.url))
		})
	}
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, want string
	}{
		{"NoScheme", "localhost:9092", "no scheme"},
		{"WrongScheme", "http://h:1", `unsupported URL scheme "http"`},
		{"NoHost", "kafka://?topic=t", "no broker address"},
		{"EmptyBrokerInList", "kafka://a:1,,b:2", "empty broker address"},
		{"BadPort", "kafka://h:99999", "port must be 1-65535"},
		{"NonNumericPort", "kafka://h:abc", "port must be 1-65535"},
		{"UnbracketedIPv6", "kafka://fe80::1::2", "IPv6"},
		{"Path", "kafka://h:1/orders", "must not have a path"},
		{"Fragment", "kafka://h:1#x", "fragment"},
		{"UnknownOption", "kafka://h:1?topik=t", `unknown URL parameter "topik" (known: acks, client_id, create_topics, linger, max_buffered, sasl, timeout, tls, topic)`},
		{"RepeatedOption", "kafka://h:1?topic=a&topic=b", "URL parameter topic given 2 times; give it once"},
		{"AcksOne", "kafka://h:1?acks=1", "acks=all"},
		{"BadBool", "kafka://h:1?create_topics=maybe", "create_topics must be true or false"},
		{"BadLinger", "kafka://h:1?linger=soon", "linger must be a duration"},
		{"NegativeLinger", "kafka://h:1?linger=-1s", "linger must be a duration of at least 0s"},
		{"ZeroTimeout", "kafka://h:1?timeout=0s", "timeout must be a duration of at least 1s"},
		{"ZeroMaxBuffered", "kafka://h:1?max_buffered=0", `max_buffered must be an integer of at least 1, got "0"`},
		{"EmptyClientID", "kafka://h:1?client_id=", "client_id must not be empty"},
		{"UnknownSASL", "kafka://u:p@h:1?sasl=gssapi", "sasl=gssapi is not supported"},
		{"SASLWithoutCredentials", "kafka://h:1?sasl=plain", "needs credentials"},
		{"CredentialsWithoutSASL", "kafka://u:p@h:1", "no SASL mechanism"},
		{"EmptyUser", "kafka://:p@h:1?sasl=plain", "empty user name"},
		{"UnknownPlaceholder", "kafka://h:1?topic=outbox.{aggregate}", "unknown placeholder {aggregate}"},
		{"UnclosedPlaceholder", "kafka://h:1?topic=outbox.{aggregate_type", "unclosed placeholder"},
		{"IllegalCharInLiteral", "kafka://h:1?topic=outbox/{aggregate_type}", `character '/' is not allowed`},
		{"DotDot", "kafka://h:1?topic=..", `cannot be "." or ".."`},
		{"TooLong", "kafka://h:1?topic=" + longName(250), "longer than 249 characters"},
		{"BadQuery", "kafka://h:1?topic=%zz", "malformed URL query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := kafkasink.New(tt.url, nil)
			require.Error(t, err)
			require.Nil(t, s)
			require.Contains(t, err.Error(), tt.want)
			require.Contains(t, err.Error(), "kafkasink: ")
			require.EqualError(t, kafkasink.CheckURL(tt.url), err.Error(), "CheckURL reports what New does")
		})
	}
}

func TestNewErrorsNeverShowThePassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"kafka://user:s3cr3t@h:1?sasl=plain&topic=a/b",
		"kafka://user:s3cr3t@h:99999?sasl=plain",
		"kafka://user:s3cr3t@h:1",
		"kafka://user:s3cr3t%zz@h:1?sasl=plain",
		"kafka://user:s3cr3t@h:1?sasl=plain&bogus=1",
		"http://user:s3cr3t@h:1",
	} {
		_, err := kafkasink.New(u, nil)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), "s3cr3t", u)
		require.EqualError(t, kafkasink.CheckURL(u), err.Error())
	}
}

func longName(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a'
	}
	return string(b)
}
