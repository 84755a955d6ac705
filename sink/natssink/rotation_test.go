package natssink_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/natssink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func rotationConfig(appPassword string) string {
	return fmt.Sprintf(`authorization {
  users = [
    {user: admin, password: "admin-pw"}
    {user: app, password: %q}
  ]
}`, appPassword)
}

// TestPasswordRotation changes the sink's password on a running server (a
// configuration reload drops the connections it no longer accepts):
// publishes fail as unavailable, never permanent, and the same sink
// delivers again once the server accepts its password.
func TestPasswordRotation(t *testing.T) {
	t.Parallel()
	addr, reload := startReloadableServer(t, rotationConfig("old-pw"))
	js := admin(t, addr, nats.UserInfo("admin", "admin-pw"))
	prefix, stream := newStream(t, js, nil)
	s := newSink(t, "nats://app:old-pw@"+addr+"?subject="+prefix+".x&reconnect_wait=50ms", nil)
	publish := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		return s.Publish(ctx, sinktest.NewMessage("a"))
	}
	require.NoError(t, publish())

	reload(rotationConfig("new-pw"))
	err := publishUntil(t, publish, outbox.IsUnavailable)
	require.True(t, outbox.IsUnavailable(err), "a refused password must make publishes unavailable: %v", err)
	require.NotContains(t, err.Error(), "old-pw")

	reload(rotationConfig("old-pw"))
	err = publishUntil(t, publish, func(err error) bool { return err == nil })
	require.NoError(t, err, "the sink must deliver again without a restart")
	require.GreaterOrEqual(t, len(newReceiver(js, stream).Receive(t, 2, 5*time.Second)), 2)
}

// publishUntil publishes until done(err) holds or 20 s have passed and
// returns the last error; a permanent error on the way fails the test, since
// a rotation must never spend a message.
func publishUntil(t *testing.T, publish func() error, done func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := publish()
		require.False(t, outbox.IsPermanent(err), "never permanent: %v", err)
		if done(err) || time.Now().After(deadline) {
			return err
		}
	}
}

// A dispatcher relays through a user whose password a configuration reload
// changes while messages wait, then changes back: every message arrives
// within a few probe intervals, none dead.
func TestCredentialHeals(t *testing.T) {
	t.Parallel()
	addr, reload := startReloadableServer(t, rotationConfig("old-pw"))
	js := admin(t, addr, nats.UserInfo("admin", "admin-pw"))
	prefix, stream := newStream(t, js, nil)
	sinktest.CredentialHeals(t, sinktest.Credential{
		New: func(t *testing.T) (outbox.Sink, sinktest.Receiver) {
			s, err := natssink.New("nats://app:old-pw@"+addr+"?subject="+prefix+".x&reconnect_wait=50ms", nil)
			require.NoError(t, err)
			return s, newReceiver(js, stream)
		},
		Break: func(*testing.T) { reload(rotationConfig("new-pw")) },
		Heal:  func(*testing.T) { reload(rotationConfig("old-pw")) },
	})
}
