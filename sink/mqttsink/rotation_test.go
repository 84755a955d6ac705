package mqttsink_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/mqttsink"
	"github.com/outboxd/outbox/sink/sinktest"
)

// TestPasswordRotation runs a private Mosquitto with a password file,
// changes the sink user's password while the sink is connected and has the
// broker reload (it drops clients whose credentials no longer pass):
// publishes fail as unavailable, never permanent, and the same sink delivers
// again once the old password is back.
func TestPasswordRotation(t *testing.T) {
	t.Parallel()
	addr, setPassword := startPasswordBroker(t, "app", "old-pw")
	s, err := mqttsink.New("mqtt://app:old-pw@"+addr+"?topic=t/{event_type}", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	publish := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		return s.Publish(ctx, sinktest.NewMessage("a"))
	}
	require.NoError(t, publishUntil(t, publish, func(err error) bool { return err == nil }))

	setPassword("new-pw")
	err = publishUntil(t, publish, outbox.IsUnavailable)
	require.True(t, outbox.IsUnavailable(err), "a refused password must make publishes unavailable: %v", err)
	require.NotContains(t, err.Error(), "old-pw")

	setPassword("old-pw")
	require.NoError(t, publishUntil(t, publish, func(err error) bool { return err == nil }),
		"the sink must deliver again without a restart")
}

// publishUntil publishes until done(err) holds or 20 s have passed and
// returns the last error; a permanent error on the way fails the test.
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

// startPasswordBroker runs a Mosquitto of its own on a free loopback port,
// accepting only the user name with password (and readerUser), and returns
// its address and a function that changes the password and has the broker
// reload it (SIGHUP).
func startPasswordBroker(t *testing.T, name, password string) (string, func(string)) {
	t.Helper()
	bin, err := exec.LookPath("mosquitto")
	require.NoError(t, err, "mosquitto must be on PATH")
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	setPassword := func(pw string) {
		t.Helper()
		out, err := exec.Command("mosquitto_passwd", "-b", passwd, name, pw).CombinedOutput()
		require.NoError(t, err, "mosquitto_passwd: %s", out)
	}
	require.NoError(t, os.WriteFile(passwd, nil, 0o600))
	out, err := exec.Command("mosquitto_passwd", "-b", passwd, readerUser, readerPassword).CombinedOutput()
	require.NoError(t, err, "mosquitto_passwd: %s", out)
	setPassword(password)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	require.NoError(t, ln.Close())
	me, err := user.Current()
	require.NoError(t, err)
	conf := filepath.Join(dir, "mosquitto.conf")
	// user: started as root, Mosquitto would switch to its own user, which
	// cannot read the test's private directory.
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(
		"user %s\nlistener %s 127.0.0.1\nallow_anonymous false\npassword_file %s\npersistence false\n",
		me.Username, port, passwd)), 0o600))
	var stderr strings.Builder
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "mosquitto did not start: %s", &stderr)
	return addr, func(pw string) {
		t.Helper()
		setPassword(pw)
		require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	}
}

// The user startPasswordBroker's broker always accepts, for a subscriber
// that outlives a rotation.
const readerUser, readerPassword = "reader", "reader-pw"

// A dispatcher relays through a user whose password the broker's reloaded
// password file changes while messages wait, then changes back: every
// message arrives within a few probe intervals, none dead.
func TestCredentialHeals(t *testing.T) {
	t.Parallel()
	addr, setPassword := startPasswordBroker(t, "app", "old-pw")
	root := newTopicRoot()
	sub := subscribeAt(t, addr, readerUser, readerPassword, root+"/#")
	sinktest.CredentialHeals(t, sinktest.Credential{
		New: func(t *testing.T) (outbox.Sink, sinktest.Receiver) {
			s, err := mqttsink.New("mqtt://app:old-pw@"+addr+"?topic="+root+"/{event_type}", nil)
			require.NoError(t, err)
			return s, sub
		},
		Break: func(*testing.T) { setPassword("new-pw") },
		Heal:  func(*testing.T) { setPassword("old-pw") },
	})
}
