package amqpsink

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Check connects to the broker rawURL names and reports, in order: the URL
// is valid; the broker is reachable and accepts the credentials and the
// vhost; the exchange exists (a passive declare, which creates nothing).
// It publishes nothing.
func Check(ctx context.Context, rawURL string) []sinkutil.Check {
	return sinkutil.RunChecks(rawURL, parseURL, func(cfg *config) []sinkutil.Check {
		reach := "broker " + cfg.display + " reachable and authenticated"
		conn, err := dialCheck(ctx, cfg)
		if err != nil {
			return []sinkutil.Check{sinkutil.Failed(reach, sinkutil.ScrubErr("amqpsink", err, rawURL), dialFix(err))}
		}
		defer conn.Close()
		return []sinkutil.Check{sinkutil.Passed(reach, "vhost "+fmt.Sprintf("%q", cfg.vhost)), checkExchange(conn, cfg)}
	})
}

func dialCheck(ctx context.Context, cfg *config) (*amqp.Connection, error) {
	timeout := cfg.connTO
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName("outboxd config check")
	return amqp.DialConfig(cfg.dialURL, amqp.Config{Dial: amqp.DefaultDial(timeout), Properties: props, Locale: "en_US"})
}

func dialFix(err error) string {
	var ae *amqp.Error
	switch {
	case errors.Is(err, amqp.ErrCredentials):
		return "correct the user and password in the URL, or create that user on the broker (rabbitmqctl add_user)"
	case errors.As(err, &ae) && ae.Code == amqp.NotAllowed:
		return "create the vhost or grant the user access to it (rabbitmqctl set_permissions -p VHOST USER '.*' '.*' '.*')"
	case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
		return "grant the user access to the vhost (rabbitmqctl set_permissions)"
	case isConfigError(err):
		return "give the sink a CA that verifies the broker's certificate (cacertfile=) or correct the host name"
	}
	return "start RabbitMQ there, or correct host and port in the URL"
}

func checkExchange(conn *amqp.Connection, cfg *config) sinkutil.Check {
	name := cfg.exchange.String()
	if !cfg.exchange.Fixed() {
		return sinkutil.Passed("exchange", sinkutil.TemplateNote("exchange", name))
	}
	if name == "" {
		return sinkutil.Passed("exchange (default)", "the default exchange always exists; routing_key names the queue")
	}
	what := fmt.Sprintf("exchange %q present", name)
	ch, err := conn.Channel()
	if err != nil {
		return sinkutil.Failed(what, fmt.Errorf("amqpsink: opening a channel: %w", err), "check the broker's channel_max and the user's permissions")
	}
	defer ch.Close()
	// Passive: the broker only answers whether it exists; kind and flags
	// are not compared.
	if err := ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return sinkutil.Failed(what, fmt.Errorf("amqpsink: %s", ae.Reason),
				fmt.Sprintf("declare it (rabbitmqadmin declare exchange name=%s type=topic durable=true) or correct exchange= in the URL", name))
		}
		return sinkutil.Failed(what, fmt.Errorf("amqpsink: %w", err), "grant the user configure or write permission on the exchange")
	}
	return sinkutil.Passed(what, "")
}
