package kafkasink

import "time"

// Config is the parsed form of a sink URL, for the URL table test.
type Config struct {
	ClientID     string
	CreateTopics bool
	Linger       time.Duration
	MaxBuffered  int
	Password     string
	SASL         string
	Seeds        []string
	Timeout      time.Duration
	TLS          bool
	Topic        string
	User         string
}

// ParseURL exposes the URL parser.
func ParseURL(raw string) (Config, error) {
	c, err := parseURL(raw)
	if err != nil {
		return Config{}, err
	}
	return Config{
		ClientID: c.clientID, CreateTopics: c.createTopics, Linger: c.linger, MaxBuffered: c.maxBuffered,
		Password: c.password, SASL: c.sasl, Seeds: c.seeds, Timeout: c.timeout, TLS: c.tls,
		Topic: c.topic.String(), User: c.user,
	}, nil
}

// Classify exposes the error classification of a sink with or without
// create_topics.
func Classify(createTopics bool, err error) error {
	return (&Sink{createTopics: createTopics}).classify("t", err)
}
