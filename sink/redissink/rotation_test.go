package redissink_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/redissink"
	"github.com/outboxd/outbox/sink/sinktest"
)

// TestPasswordRotation changes an ACL user's password while a sink uses it
// and drops the user's connections, as a rotation does: publishes fail as
// unavailable (the message keeps its attempt), never permanent, and the same
// sink delivers again once the old password is restored.
func TestPasswordRotation(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)
	user := strings.ReplaceAll(key, ":", "-")
	ctx := t.Context()
	require.NoError(t, c.Do(ctx, "ACL", "SETUSER", user, "on", ">old-pw", "~*", "+@all").Err())
	t.Cleanup(func() { _ = c.Do(context.Background(), "ACL", "DELUSER", user).Err() })

	s, err := redissink.New("redis://"+user+":old-pw@"+upstream+"/0?stream="+key+"&idmp=off", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	publish := func() error {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return s.Publish(ctx, sinktest.NewMessage("a"))
	}
	require.NoError(t, publish())

	require.NoError(t, c.Do(ctx, "ACL", "SETUSER", user, "resetpass", ">new-pw").Err())
	require.NoError(t, c.Do(ctx, "CLIENT", "KILL", "USER", user).Err())
	for range 3 {
		err := publish()
		require.Error(t, err)
		require.True(t, outbox.IsUnavailable(err), "want unavailable: %v", err)
		require.False(t, outbox.IsPermanent(err))
		require.NotContains(t, err.Error(), "old-pw")
	}

	require.NoError(t, c.Do(ctx, "ACL", "SETUSER", user, "resetpass", ">old-pw").Err())
	require.NoError(t, publish())
	require.Equal(t, int64(2), c.XLen(ctx, key).Val())
}

// The reported incident end to end: a dispatcher relays through an ACL user
// whose password is rotated (its connections killed) while messages wait,
// then restored: every message arrives within a few probe intervals, none
// dead.
func TestCredentialHeals(t *testing.T) {
	t.Parallel()
	c := direct(t)
	key := newKey(t, c)
	user := strings.ReplaceAll(key, ":", "-")
	require.NoError(t, c.Do(t.Context(), "ACL", "SETUSER", user, "on", ">old-pw", "~*", "+@all").Err())
	t.Cleanup(func() { _ = c.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	sinktest.CredentialHeals(t, sinktest.Credential{
		New: func(t *testing.T) (outbox.Sink, sinktest.Receiver) {
			s, err := redissink.New("redis://"+user+":old-pw@"+upstream+"/0?stream="+key+"&idmp=off", nil)
			require.NoError(t, err)
			return s, streamReceiver{c: c, key: key}
		},
		Break: func(t *testing.T) {
			require.NoError(t, c.Do(t.Context(), "ACL", "SETUSER", user, "resetpass", ">new-pw").Err())
			require.NoError(t, c.Do(t.Context(), "CLIENT", "KILL", "USER", user).Err())
		},
		Heal: func(t *testing.T) {
			require.NoError(t, c.Do(t.Context(), "ACL", "SETUSER", user, "resetpass", ">old-pw").Err())
		},
	})
}
