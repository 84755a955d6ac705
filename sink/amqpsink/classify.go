package amqpsink

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxd/outbox"
	"github.com/outboxd/outbox/sink/sinkutil"
)

var (
	errNacked      = errors.New("amqpsink: broker nacked the message (internal error on the broker)")
	errClosed      = errors.New("amqpsink: sink closed")
	errChannelGone = errors.New("amqpsink: channel closed before the broker confirmed the message")
)

// maxSizeRE reads the limit out of RabbitMQ's reply when a message is larger
// than max_message_size: "PRECONDITION_FAILED - message size 200 is larger
// than configured max size 100".
var maxSizeRE = regexp.MustCompile(`larger than configured max size (\d+)`)

// classifyClose maps the reason a channel closed to the outcome of one
// message that was awaiting its confirm on it: exchange and size describe
// that message.
//
// A channel exception names what it is about in its reply text, so a
// message is sent dead only when the text points at it (a missing or
// forbidden exchange it was published to, a size over the broker's limit).
// Every other message in flight on the channel was collateral: the broker
// may or may not have taken it, so it is retryable.
func classifyClose(e *amqp.Error, exchange string, size int) error {
	if e == nil {
		return outbox.Retryable(errChannelGone)
	}
	name := exchange
	if name == "" {
		name = "amq.default"
	}
	aboutExchange := strings.Contains(e.Reason, "exchange '"+name+"'")
	switch e.Code {
	case amqp.NotFound:
		if aboutExchange {
			return outbox.Permanent(fmt.Errorf("amqpsink: broker refused the publish to exchange %q: %w", exchange, e))
		}
	case amqp.AccessRefused:
		// A missing write permission is the credentials' condition (a
		// permission removed or not granted yet), not the message's.
		if aboutExchange {
			return outbox.Unavailable(fmt.Errorf("amqpsink: broker refused write access to exchange %q: %w", exchange, e))
		}
	case amqp.PreconditionFailed:
		if m := maxSizeRE.FindStringSubmatch(e.Reason); m != nil {
			if limit, err := strconv.Atoi(m[1]); err == nil && size > limit {
				return outbox.Permanent(fmt.Errorf("amqpsink: message of %d bytes is over the broker's max_message_size: %w", size, e))
			}
		}
	}
	return outbox.Retryable(fmt.Errorf("%w: %w", errChannelGone, e))
}

// isConfigError reports whether a failed connection attempt is one that only
// a change of configuration fixes: refused credentials or vhost access, a
// vhost that does not exist, a certificate either side refuses.
func isConfigError(err error) bool {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused:
			return true
		case amqp.NotAllowed:
			// 530 also reports a reached connection limit, which passes.
			return !strings.Contains(ae.Reason, "limit")
		}
		return false
	}
	return sinkutil.IsCertificateError(err)
}
