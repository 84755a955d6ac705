package sinkutil_test

import (
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/sinkutil"
)

var testSpec = sinkutil.QuerySpec{Known: []string{"timeout", "count", "flag", "name", "mode", "token", "multi"}, Repeatable: []string{"multi"}}

func parse(t *testing.T, raw string) sinkutil.Query {
	t.Helper()
	q, err := testSpec.Parse(raw, "x://h?"+raw)
	require.NoError(t, err)
	return q
}

func TestQueryParse(t *testing.T) {
	t.Parallel()
	_, err := testSpec.Parse("timout=1s", "")
	require.EqualError(t, err, `unknown URL parameter "timout" (known: count, flag, mode, multi, name, timeout, token)`)
	_, err = testSpec.Parse("count=1&count=2", "")
	require.EqualError(t, err, "URL parameter count given 2 times; give it once")
	_, err = testSpec.Parse("b=1&a=2", "")
	require.ErrorContains(t, err, `unknown URL parameter "a"`, "the first unknown key in order is named")
	q := parse(t, "multi=a&multi=b")
	require.Equal(t, []string{"a", "b"}, q.Values("multi", "name")["multi"], "a repeatable key keeps every value")
	require.NotContains(t, q.Values("multi", "name"), "name")
	_, err = testSpec.Parse("token=%zz", "x://h?token=%zz")
	require.ErrorContains(t, err, "malformed URL query")
}

func TestQueryString(t *testing.T) {
	t.Parallel()
	q := parse(t, "name=&mode=b")
	require.Equal(t, "", q.String("name", "def"), "present but empty is kept")
	require.Equal(t, "def", q.String("flag", "def"))
	require.True(t, q.Has("name"))
	_, err := q.NonEmpty("name", "def")
	require.EqualError(t, err, "name must not be empty")
	v, err := q.NonEmpty("flag", "def")
	require.NoError(t, err)
	require.Equal(t, "def", v)
	v, err = q.OneOf("mode", "a", "a", "b")
	require.NoError(t, err)
	require.Equal(t, "b", v)
	_, err = parse(t, "mode=c").OneOf("mode", "a", "a", "b")
	require.EqualError(t, err, `mode must be one of a, b, got "c"`)
}

func TestQueryBool(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]bool{"flag=on": true, "flag=OFF": false, "flag=true": true, "flag=0": false} {
		got, err := parse(t, raw).Bool("flag", !want)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
	}
	got, err := parse(t, "").Bool("flag", true)
	require.NoError(t, err)
	require.True(t, got, "absent takes the default")
	_, err = parse(t, "flag=yes").Bool("flag", false)
	require.EqualError(t, err, `flag must be true or false (on or off), got "yes"`)
}

func TestQueryDuration(t *testing.T) {
	t.Parallel()
	d, err := parse(t, "timeout=250ms").Duration("timeout", time.Second, 0, 0)
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, d)
	d, err = parse(t, "").Duration("timeout", time.Second, time.Hour, 0)
	require.NoError(t, err)
	require.Equal(t, time.Second, d, "the default is not checked against the bounds")
	for _, tt := range []struct {
		raw      string
		min, max time.Duration
		want     string
	}{
		{"timeout=5", 0, 0, `timeout must be a duration of at least 0s (such as 5s), got "5"`},
		{"timeout=0s", sinkutil.Positive, 0, `timeout must be a positive duration such as 5s, got "0s"`},
		{"timeout=2h", sinkutil.Positive, time.Hour, `timeout must be a positive duration of at most 1h0m0s, got "2h"`},
		{"timeout=1ms", time.Second, time.Minute, `timeout must be a duration from 1s to 1m0s, got "1ms"`},
	} {
		_, err := parse(t, tt.raw).Duration("timeout", 0, tt.min, tt.max)
		require.EqualError(t, err, tt.want, tt.raw)
	}
}

func TestQueryInt(t *testing.T) {
	t.Parallel()
	n, err := parse(t, "count=7").Int("count", 1, 1, 10)
	require.NoError(t, err)
	require.Equal(t, 7, n)
	n, err = parse(t, "").Int("count", 3, 1, 10)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = parse(t, "count=11").Int("count", 1, 1, 10)
	require.EqualError(t, err, `count must be an integer from 1 to 10, got "11"`)
	_, err = parse(t, "count=x").Int("count", 1, 1, 0)
	require.EqualError(t, err, `count must be an integer of at least 1, got "x"`)
	_, err = parse(t, "count=0").IntOf("count", "seconds", 1, 1, 60)
	require.EqualError(t, err, `count must be a whole number of seconds from 1 to 60, got "0"`)
}

func TestQuerySecretValueNotEchoed(t *testing.T) {
	t.Parallel()
	_, err := parse(t, "token=s3cr3t").Int("token", 0, 1, 0)
	require.EqualError(t, err, `token must be an integer of at least 1, got "xxxxx"`)
}

func TestReserved(t *testing.T) {
	t.Parallel()
	r := sinkutil.Reserved{Names: []string{"Host"}, Prefixes: []string{"Content-"}}
	require.True(t, r.Has("host"))
	require.True(t, r.Has("content-type"))
	require.True(t, r.Has("OUTBOX-ID"), "Outbox-* is always reserved")
	require.False(t, r.Has("Hostname"), "a name is reserved exactly")
	require.False(t, sinkutil.Reserved{}.Has("Host"))
}

func TestPrepareAndParseError(t *testing.T) {
	t.Parallel()
	type opts struct{ N int }
	parseLen := func(s string) (int, error) {
		if s == "" {
			return 0, errEmpty
		}
		return len(s), nil
	}
	n, o, err := sinkutil.Prepare("abc", (*opts)(nil), parseLen)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, &opts{}, o, "nil options become the zero options")
	given := &opts{N: 1}
	_, o, _ = sinkutil.Prepare("abc", given, parseLen)
	require.Same(t, given, o)
	require.ErrorIs(t, sinkutil.ParseError("", parseLen), errEmpty)
	require.NoError(t, sinkutil.ParseError("x", parseLen))
	ran := false
	checks := sinkutil.RunChecks("", parseLen, func(int) []sinkutil.Check { ran = true; return nil })
	require.False(t, ran, "no check runs after an invalid URL")
	require.Len(t, checks, 1)
	require.ErrorIs(t, checks[0].Err, errEmpty)
	reach := sinkutil.Passed("reachable", "")
	checks = sinkutil.RunChecks("xy", parseLen, func(n int) []sinkutil.Check {
		require.Equal(t, 2, n)
		return []sinkutil.Check{reach}
	})
	require.Equal(t, []sinkutil.Check{sinkutil.URLCheck(nil), reach}, checks)
	err = sinkutil.ScrubErr("xsink", errors.New("dial u:s3cr3t@h: refused"), "x://u:s3cr3t@h")
	require.Equal(t, "xsink: dial u:"+sinkutil.Redacted+"@h: refused", err.Error())
	require.NotNil(t, sinkutil.Logger(nil))
}

var errEmpty = errors.New("empty")

func TestURLForm(t *testing.T) {
	t.Parallel()
	f := sinkutil.URLForm{Pkg: "xsink", Schemes: []string{"x", "xs"}, Rest: "host:port"}
	u, err := f.Parse("xs://u:s3cr3t@h:1/p")
	require.NoError(t, err)
	require.Equal(t, "h", u.Hostname())
	for raw, want := range map[string]string{
		"h:1":                 `xsink: unsupported URL scheme "h"; want x or xs`,
		"//h":                 "xsink: URL has no scheme; want x:// or xs://",
		"y://h":               `xsink: unsupported URL scheme "y"; want x or xs`,
		"x:///p":              "xsink: URL has no host; want x://host:port",
		"x://u:s3cr3t@h:port": "xsink: malformed URL",
	} {
		_, err := f.Parse(raw)
		require.ErrorContains(t, err, want, raw)
		require.NotContains(t, err.Error(), "s3cr3t")
	}
	require.NoError(t, f.NoFragment("x://h"))
	require.EqualError(t, f.NoFragment("x://h#"), "xsink: URL must not contain a raw '#' (it starts a fragment that would be dropped); write %23")
}

func TestTLSConfigAndPort(t *testing.T) {
	t.Parallel()
	c := sinkutil.TLSConfig(nil, "h")
	require.Equal(t, uint16(tls.VersionTLS12), c.MinVersion)
	require.Equal(t, "h", c.ServerName)
	given := &tls.Config{MinVersion: tls.VersionTLS13}
	c = sinkutil.TLSConfig(given, "h")
	require.NotSame(t, given, c, "the option is cloned, never changed")
	require.Empty(t, given.ServerName)
	require.Equal(t, "h", c.ServerName)
	require.Equal(t, uint16(tls.VersionTLS13), c.MinVersion)
	require.Equal(t, "other", sinkutil.TLSConfig(&tls.Config{ServerName: "other"}, "h").ServerName)
	for port, ok := range map[string]bool{"1": true, "65535": true, "0": false, "65536": false, "": false, "x": false, "-1": false} {
		require.Equal(t, ok, sinkutil.ValidPort(port), port)
	}
}
