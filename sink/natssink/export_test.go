package natssink

// CloseConn closes the sink's client connection for good, as the client
// library does on a fatal protocol error.
func CloseConn(s *Sink) { s.cur.Load().nc.Close() }

// Connected reports whether the sink's client is connected right now.
func Connected(s *Sink) bool { return s.cur.Load().nc.IsConnected() }

// Classify classifies a publish error as Publish does; createStream says
// whether the URL had create_stream.
func Classify(err error, createStream bool) error {
	s := &Sink{cfg: &config{}, servers: "nats://test:4222"}
	if createStream {
		s.cfg.stream = "S"
	}
	return s.classify(err, "subj")
}

// StreamSubject is the subject a created stream gets for rawURL.
func StreamSubject(rawURL string) (string, error) {
	cfg, err := parseURL(rawURL)
	if err != nil {
		return "", err
	}
	return cfg.streamSubject, nil
}
