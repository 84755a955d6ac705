package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The window counts what grew within the last minute of samples.
func TestRateWindowCountsTheLastMinute(t *testing.T) {
	t.Parallel()
	var w rateWindow
	t0 := time.Unix(1000, 0)
	require.EqualValues(t, 0, w.add(t0, 5), "the first sample")
	require.EqualValues(t, 10, w.add(t0.Add(10*time.Second), 15))
	require.EqualValues(t, 25, w.add(t0.Add(50*time.Second), 30))
	require.EqualValues(t, 25, w.add(t0.Add(60*time.Second), 30), "t0's sample is a minute old: the window starts at it")
	require.EqualValues(t, 15, w.add(t0.Add(70*time.Second), 30), "t0+10s's sample starts it")
	require.EqualValues(t, 0, w.add(t0.Add(200*time.Second), 30), "nothing within the minute")
	require.Len(t, w.samples, 2, "older samples are dropped; the newest a minute old or more stays as the base")
}

func TestBeatEvery(t *testing.T) {
	t.Parallel()
	require.Equal(t, time.Second, beatEvery(time.Second))
	require.Equal(t, 2*time.Second, beatEvery(6*time.Second))
	require.Equal(t, 10*time.Second, beatEvery(time.Minute))
}
