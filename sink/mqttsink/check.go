package mqttsink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Check connects to the broker rawURL names and reports, in order: the URL
// is valid; the broker is reachable and accepts the credentials (one MQTT 5
// CONNECT with a clean start, then DISCONNECT). Topics need no creation, so
// there is nothing else to look up; the broker's ACL on the topic shows only
// in a PUBACK, which a check does not provoke. It publishes nothing.
func Check(ctx context.Context, rawURL string) []sinkutil.Check {
	return sinkutil.RunChecks(rawURL, parseURL, func(c *urlConfig) []sinkutil.Check { return []sinkutil.Check{checkBroker(ctx, rawURL, c)} })
}

// checkBroker connects once.
func checkBroker(ctx context.Context, rawURL string, c *urlConfig) sinkutil.Check {
	addr := net.JoinHostPort(c.host, c.port)
	reach := "broker " + c.u.Scheme + "://" + addr + " reachable and authenticated"
	ctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	err := connectOnce(ctx, c, addr)
	switch {
	case err == nil:
		return sinkutil.Passed(reach, "")
	case isConnackRefusal(err):
		return sinkutil.Failed(reach, sinkutil.ScrubErr("mqttsink", err, rawURL),
			"correct the user and password in the URL, or allow this client on the broker (password file, ACL)")
	}
	return sinkutil.Failed(reach, sinkutil.ScrubErr("mqttsink", err, rawURL), "start the MQTT broker there, or correct host and port in the URL")
}

// connackRefusal is a CONNACK with a failure reason code.
type connackRefusal struct {
	code   byte
	reason string
}

func (e *connackRefusal) Error() string {
	return fmt.Sprintf("broker refused the connection: reason 0x%02x %s", e.code, e.reason)
}

func isConnackRefusal(err error) bool {
	var cr *connackRefusal
	return errors.As(err, &cr) && (cr.code == 0x86 || cr.code == 0x87 || cr.code == 0x8C)
}

func connectOnce(ctx context.Context, c *urlConfig, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	if c.u.Scheme == "mqtts" {
		tc := tls.Client(conn, sinkutil.TLSConfig(nil, c.host))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = conn.Close()
			return err
		}
		conn = tc
	}
	client := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: c.clientID, PacketTimeout: c.connectTimeout})
	cp := &paho.Connect{ClientID: c.clientID, CleanStart: true, KeepAlive: 30}
	if c.clientID == "" {
		cp.ClientID = ClientIDPrefix + "check-" + fmt.Sprint(time.Now().UnixNano())
	}
	if c.u.User != nil {
		cp.Username, cp.UsernameFlag = c.u.User.Username(), true
		if pw, ok := c.u.User.Password(); ok {
			cp.Password, cp.PasswordFlag = []byte(pw), true
		}
	}
	ca, err := client.Connect(ctx, cp)
	if ca != nil && ca.ReasonCode >= 0x80 {
		_ = conn.Close()
		return &connackRefusal{code: ca.ReasonCode, reason: reasonText(ca)}
	}
	if err != nil {
		_ = conn.Close()
		return err
	}
	err = client.Disconnect(&paho.Disconnect{ReasonCode: 0})
	<-client.Done()
	return err
}

func reasonText(ca *paho.Connack) string {
	if ca.Properties != nil && ca.Properties.ReasonString != "" {
		return ca.Properties.ReasonString
	}
	return connackNames[ca.ReasonCode]
}

// connackNames are the CONNACK reason codes a check may meet (MQTT 5,
// section 3.2.2.2).
var connackNames = map[byte]string{
	0x80: "Unspecified error",
	0x84: "Unsupported Protocol Version",
	0x85: "Client Identifier not valid",
	0x86: "Bad User Name or Password",
	0x87: "Not authorized",
	0x88: "Server unavailable",
	0x89: "Server busy",
	0x8A: "Banned",
	0x8C: "Bad authentication method",
}
