package service

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOutage(t *testing.T) {
	t.Parallel()
	var o Outage
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	refused := errors.New("connection refused")

	_, _, ended := o.Recovered(at)
	require.False(t, ended, "no outage to end")
	require.Equal(t, slog.LevelError, o.Failed(at, refused, slog.LevelError), "the first failure")
	for i := 1; i < 30; i++ {
		require.Equal(t, slog.LevelDebug, o.Failed(at.Add(time.Duration(i)*time.Second), refused, slog.LevelError), "the same failure again")
	}
	require.Equal(t, slog.LevelWarn, o.Failed(at.Add(time.Minute), refused, slog.LevelError), "a reminder a minute on")
	require.Equal(t, slog.LevelDebug, o.Failed(at.Add(61*time.Second), refused, slog.LevelError))
	require.Equal(t, slog.LevelWarn, o.Failed(at.Add(62*time.Second), errors.New("permission denied"), slog.LevelWarn), "another error")
	since, tries, down := o.Down()
	require.True(t, down)
	require.Equal(t, at, since)
	require.Equal(t, 33, tries)

	took, tries, ended := o.Recovered(at.Add(90 * time.Second))
	require.True(t, ended)
	require.Equal(t, 90*time.Second, took)
	require.Equal(t, 33, tries)
	_, _, down = o.Down()
	require.False(t, down)
	require.Equal(t, slog.LevelError, o.Failed(at.Add(100*time.Second), refused, slog.LevelError), "a new outage is logged again")
}
