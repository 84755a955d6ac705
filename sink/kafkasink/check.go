package kafkasink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxd/outbox/sink/sinkutil"
)

// Check connects to the cluster rawURL names and reports, in order: the
// URL is valid; a seed broker is reachable and accepts the credentials
// (SASL, TLS); the topic exists, unless it is a template or the URL asks for
// create_topics. It asks for metadata only: nothing is produced and no
// topic is created.
func Check(ctx context.Context, rawURL string) []sinkutil.Check {
	return sinkutil.RunChecks(rawURL, parse, func(c *config) []sinkutil.Check { return checkCluster(ctx, rawURL, c) })
}

// checkCluster pings the seed brokers, then looks the topic up.
func checkCluster(ctx context.Context, rawURL string, c *config) []sinkutil.Check {
	reach := "brokers " + strings.Join(c.seeds, ",") + " reachable and authenticated"
	client, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.seeds...), kgo.ClientID(c.clientID),
		kgo.RequestRetries(0)}, connOpts(c, &Options{})...)...)
	if err != nil {
		return []sinkutil.Check{sinkutil.Failed(reach, fmt.Errorf("kafkasink: %w", err), "correct the broker list in the URL")}
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := client.Ping(ctx); err != nil {
		return []sinkutil.Check{sinkutil.Failed(reach, sinkutil.ScrubErr("kafkasink", err, rawURL), pingFix(err))}
	}
	return []sinkutil.Check{sinkutil.Passed(reach, ""), checkTopicPresent(ctx, client, c)}
}

// pingFix says how to fix a failed ping.
func pingFix(err error) string {
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.IllegalSaslState), errors.Is(err, kerr.UnsupportedSaslMechanism):
		return "correct the user, password and sasl= mechanism in the URL"
	}
	return "start the brokers, or correct host and port in the URL"
}

func checkTopicPresent(ctx context.Context, client *kgo.Client, c *config) sinkutil.Check {
	name := c.topic.String()
	if !c.topic.Fixed() {
		return sinkutil.Passed("topic", sinkutil.TemplateNote("topic", name))
	}
	what := fmt.Sprintf("topic %q present", name)
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(name)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, client)
	if err != nil {
		return sinkutil.Failed(what, fmt.Errorf("kafkasink: asking for metadata: %w", err), "check the brokers' logs")
	}
	if len(resp.Topics) != 1 {
		return sinkutil.Failed(what, fmt.Errorf("kafkasink: metadata answer has %d topics, want 1", len(resp.Topics)), "check the brokers' logs")
	}
	err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	switch {
	case err == nil:
		return sinkutil.Passed(what, fmt.Sprintf("%d partitions", len(resp.Topics[0].Partitions)))
	case errors.Is(err, kerr.UnknownTopicOrPartition) && c.createTopics:
		return sinkutil.Passed(what, "absent: created on first publish (create_topics=true)")
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return sinkutil.Failed(what, fmt.Errorf("kafkasink: %w", err),
			fmt.Sprintf("create it (kafka-topics.sh --create --topic %s) or add create_topics=true to the URL", name))
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		return sinkutil.Failed(what, fmt.Errorf("kafkasink: %w", err), "grant the user DESCRIBE and WRITE on the topic")
	}
	return sinkutil.Failed(what, fmt.Errorf("kafkasink: %w", err), "check the brokers' logs")
}
