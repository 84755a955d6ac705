package service

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A limited listener accepts up to its cap; the next connection waits in
// the backlog until one of those closes; Close ends a waiting Accept.
func TestLimitListener(t *testing.T) {
	t.Parallel()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ln := &limitListener{Listener: inner, sem: make(chan struct{}, 2), done: make(chan struct{})}
	accepted := make(chan net.Conn, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		require.FailNow(t, "a third connection accepted past the cap")
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, first.Close())
	third := <-accepted
	require.NotNil(t, third, "accepted once a slot is free")
	require.NoError(t, second.Close())
	require.NoError(t, third.Close())
	require.NoError(t, ln.Close())
	_, open := <-accepted
	require.False(t, open, "Accept ends with Close")
	require.GreaterOrEqual(t, connCap(4, 256), 4)
}
