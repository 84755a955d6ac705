package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/outboxd/outbox/internal/service"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunnerStartStop(t *testing.T) {
	var r service.Runner
	require.NoError(t, r.Stop(), "Stop before Start")

	started := make(chan struct{})
	boom := errors.New("boom")
	loop := func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		return boom
	}
	require.NoError(t, r.Start(t.Context(), loop))
	<-started
	require.ErrorIs(t, r.Start(t.Context(), loop), service.ErrRunning)
	require.ErrorIs(t, r.Stop(), boom, "Stop returns the loop's error")
	require.NoError(t, r.Stop(), "a second Stop")
}

func TestRunnerRestartsAfterItsContextEnded(t *testing.T) {
	var r service.Runner
	ctx, cancel := context.WithCancel(t.Context())
	require.NoError(t, r.Start(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }))
	cancel()
	<-r.Done()
	runs := make(chan struct{}, 1)
	require.NoError(t, r.Start(t.Context(), func(ctx context.Context) error {
		runs <- struct{}{}
		<-ctx.Done()
		return nil
	}), "a loop that ended on its own may start again")
	<-runs
	require.NoError(t, r.Stop())
}

func TestSleep(t *testing.T) {
	require.True(t, service.Sleep(t.Context(), time.Millisecond))
	require.True(t, service.Sleep(t.Context(), 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.False(t, service.Sleep(ctx, time.Hour), "a done context ends the wait")
	require.False(t, service.Sleep(ctx, 0))
}

func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	turns := 0
	service.Every(ctx, time.Millisecond, func() {
		turns++
		if turns == 3 {
			cancel()
		}
	})
	require.Equal(t, 3, turns, "at once, then after each turn, until ctx is done")
	service.Every(ctx, time.Hour, func() { turns++ })
	require.Equal(t, 3, turns, "a done context runs no turn")
}
