package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPostgresCPU(t *testing.T) {
	t.Parallel()
	line := "4242 (postgres) S 1 4242 4242 0 -1 4194560 3301 0 0 0 250 17 0 0 20 0 1 0 1234 226058240 5214 18446744073709551615\n"
	pid, cpu, ok := postgresCPU([]byte(line))
	require.True(t, ok)
	require.Equal(t, 4242, pid)
	require.Equal(t, 267*clockTick, cpu, "utime + stime")

	_, _, ok = postgresCPU([]byte("7 (bash) S 1 7 7 0 -1 0 0 0 0 0 250 17 0 0 20 0 1 0 1 1 1 1\n"))
	require.False(t, ok, "another command")
	_, _, ok = postgresCPU([]byte("8 (postgres) S 1\n"))
	require.False(t, ok, "too few fields")
	// A command named with a parenthesis: fields count from the last one.
	pid, cpu, ok = postgresCPU([]byte("9 (a) b) S 1 9 9 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 1 1 1 1\n"))
	require.False(t, ok)
	require.Zero(t, pid+int(cpu))
}
