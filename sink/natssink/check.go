package natssink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Check connects to the broker rawURL names and reports, in order: the URL
// is valid; the broker is reachable and accepts the credentials; JetStream
// is enabled for the account; a stream captures the subject (or, with
// create_stream, whether that stream exists yet). It publishes nothing and
// creates nothing.
func Check(ctx context.Context, rawURL string) []sinkutil.Check {
	return sinkutil.RunChecks(rawURL, parseURL, func(cfg *config) []sinkutil.Check { return checkServer(ctx, cfg) })
}

// checkServer connects, then asks JetStream for the account and the stream.
func checkServer(ctx context.Context, cfg *config) []sinkutil.Check {
	servers := strings.Join(cfg.servers, ",")
	reach := "broker " + servers + " reachable and authenticated"
	nc, err := nats.Connect(servers, checkOptions(cfg)...)
	if err != nil {
		return []sinkutil.Check{sinkutil.Failed(reach, fmt.Errorf("natssink: %w", err), connectFix(err))}
	}
	defer nc.Close()
	checks := []sinkutil.Check{sinkutil.Passed(reach, "server "+nc.ConnectedServerVersion())}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(cfg.connectTimeout))
	if err == nil {
		_, err = js.AccountInfo(ctx)
	}
	if err != nil {
		return append(checks, sinkutil.Failed("JetStream enabled", fmt.Errorf("natssink: %w", err),
			"run nats-server with -js (or jetstream {} in its config) and enable JetStream for the account"))
	}
	return append(checks, sinkutil.Passed("JetStream enabled", ""), checkStream(ctx, js, cfg))
}

// connectFix says how to fix a failed connection.
func connectFix(err error) string {
	if isAuthErr(err) {
		return "correct the user and password (or token, or creds file) in the URL, or grant them on the server"
	}
	return "start nats-server there, or correct host and port in the URL"
}

func checkStream(ctx context.Context, js jetstream.JetStream, cfg *config) sinkutil.Check {
	if cfg.stream != "" {
		what := fmt.Sprintf("stream %q (create_stream)", cfg.stream)
		_, err := js.Stream(ctx, cfg.stream)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return sinkutil.Passed(what, "absent: the sink creates it on first use")
		case err != nil:
			return sinkutil.Failed(what, fmt.Errorf("natssink: looking up the stream: %w", err), "grant the user access to the JetStream API ($JS.API.>)")
		}
		return sinkutil.Passed(what, "present")
	}
	what := fmt.Sprintf("a stream captures subject %q", cfg.streamSubject)
	name, err := js.StreamNameBySubject(ctx, cfg.streamSubject)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return sinkutil.Failed(what, errors.New("natssink: no stream listens on that subject, so every publish would fail"),
			fmt.Sprintf("create one (nats stream add OUTBOX --subjects %q) or add create_stream=NAME to the URL", cfg.streamSubject))
	case err != nil:
		return sinkutil.Failed(what, fmt.Errorf("natssink: looking up the stream: %w", err), "grant the user access to the JetStream API ($JS.API.>)")
	}
	return sinkutil.Passed(what, "stream "+name)
}

// checkOptions are the connection options of a check: the sink's
// credentials and TLS, one attempt, no reconnection.
func checkOptions(cfg *config) []nats.Option {
	o := []nats.Option{nats.Name(cfg.name + " config check"), nats.Timeout(cfg.connectTimeout), nats.NoReconnect()}
	switch {
	case cfg.user != "":
		o = append(o, nats.UserInfo(cfg.user, cfg.password))
	case cfg.token != "":
		o = append(o, nats.Token(cfg.token))
	case cfg.creds != "":
		o = append(o, nats.UserCredentials(cfg.creds))
	}
	if cfg.tls {
		o = append(o, nats.Secure())
	}
	return o
}
