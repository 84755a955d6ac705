package amqpsink_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/amqpsink"
	"github.com/outboxd/outbox/sink/sinktest"
)

// TestVhostPermissionRemovedWhileRunning removes the sink user's
// permissions on the vhost while the sink runs: publishes fail as
// unavailable (the message keeps its attempt), never permanent, and once the
// permissions are back the same sink delivers.
//
// Not parallel: each rabbitmqctl call starts an Erlang VM, seconds of CPU
// that starve the timing-bound tests running alongside on a small machine.
func TestVhostPermissionRemovedWhileRunning(t *testing.T) {
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	user := newUser(t, "pw", ".*", ".*", ".*")
	raw := (&url.URL{Scheme: "amqp", User: url.UserPassword(user, "pw"), Host: upstream, Path: "/",
		RawQuery: url.Values{"routing_key": {r.name}, "reconnect_max": {"200ms"}}.Encode()}).String()
	s, err := amqpsink.New(raw, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	require.NoError(t, s.Publish(publishCtx(t), sinktest.NewMessage("a")))

	ctl(t, "clear_permissions", "-p", "/", user)
	m := sinktest.NewMessage("a")
	err = publishUntil(t, s, m, outbox.IsUnavailable)
	require.True(t, outbox.IsUnavailable(err), "a removed permission must make publishes unavailable: %v", err)

	ctl(t, "set_permissions", "-p", "/", user, ".*", ".*", ".*")
	err = publishUntil(t, s, m, func(err error) bool { return err == nil })
	require.NoError(t, err, "the sink must deliver again without a restart")
	require.Empty(t, r.waitIDs([]string{m.IDString()}, 10*time.Second))
}

// publishUntil publishes m until done(err) holds or 20 s have passed and
// returns the last error; a permanent error on the way fails the test, since
// a credential incident must never spend a message.
func publishUntil(t *testing.T, s *amqpsink.Sink, m *outbox.Message, done func(error) bool) error {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := s.Publish(publishCtx(t), m)
		require.False(t, outbox.IsPermanent(err), "never permanent: %v", err)
		if done(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A dispatcher relays through a user whose password is changed (its
// connections closed) while messages wait, then changed back: every message
// arrives within a few probe intervals, none dead.
//
// Not parallel, for rabbitmqctl (above).
func TestCredentialHeals(t *testing.T) {
	a := newAdmin(t)
	r := a.queue(t, nil, "")
	user := newUser(t, "old-pw", ".*", ".*", ".*")
	sinktest.CredentialHeals(t, sinktest.Credential{
		New: func(t *testing.T) (outbox.Sink, sinktest.Receiver) {
			raw := (&url.URL{Scheme: "amqp", User: url.UserPassword(user, "old-pw"), Host: upstream, Path: "/",
				RawQuery: url.Values{"routing_key": {r.name}, "reconnect_max": {"200ms"}}.Encode()}).String()
			s, err := amqpsink.New(raw, nil)
			require.NoError(t, err)
			return s, r
		},
		Break: func(t *testing.T) {
			ctl(t, "change_password", user, "new-pw")
			ctl(t, "close_all_user_connections", user, "password rotated")
		},
		Heal: func(t *testing.T) { ctl(t, "change_password", user, "old-pw") },
	})
}
