//go:build failpoints

package failpoint

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	ps, err := parse("a=kill@3, b=hang@2:1s,c=hang%0.5:0s,d=error%0.25,e=sleep:10ms,f=kill-after:5ms")
	require.NoError(t, err)
	require.Equal(t, &point{action: "kill", n: 3}, ps["a"])
	require.Equal(t, &point{action: "hang", n: 2, d: time.Second}, ps["b"])
	require.Equal(t, &point{action: "hangp", p: 0.5}, ps["c"])
	require.Equal(t, &point{action: "errorp", p: 0.25}, ps["d"])
	require.Equal(t, &point{action: "sleep", d: 10 * time.Millisecond}, ps["e"])
	require.Equal(t, &point{action: "kill-after", d: 5 * time.Millisecond}, ps["f"])

	for _, bad := range []string{"x", "x=hang@0:1s", "x=hang@1", "x=error%2", "x=error%0.1:1s", "x=sleep:-1s", "x=wobble"} {
		_, err := parse(bad)
		require.Error(t, err, bad)
	}
}

func TestErrorInjects(t *testing.T) {
	ps, err := parse("hang=hang@2:20ms,bad=error%1,none=error%0")
	require.NoError(t, err)
	mu.Lock()
	points, rng = ps, rand.New(rand.NewPCG(1, 2))
	mu.Unlock()

	require.NoError(t, Error("hang")) // the first hit passes
	start := time.Now()
	err = Error("hang")
	require.ErrorContains(t, err, "the sink hung 20ms")
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	require.NoError(t, Error("hang"))

	require.NoError(t, Error("none"))
	require.NoError(t, Error("unarmed"))
	var invalid, nul bool
	for range 200 {
		err := Error("bad")
		require.Error(t, err)
		invalid = invalid || !utf8.ValidString(err.Error())
		nul = nul || strings.ContainsRune(err.Error(), 0)
	}
	require.True(t, invalid, "no error text with invalid UTF-8")
	require.True(t, nul, "no error text with a NUL byte")
}
