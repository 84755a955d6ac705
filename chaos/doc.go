//go:build chaos

// Package chaos is outboxd's fault-injection suite, in the manner of
// Jepsen: real outboxd processes (built with -tags failpoints) relay a real
// PostgreSQL outbox to a recording HTTP receiver (or, in
// TestRandomFaultsNATS, to NATS JetStream streams) while the suite crashes,
// pauses and cuts them off from outside, then a checker counts what
// matters. It builds only with -tags chaos; see docs/reliability.md and
// `make chaos`.
package chaos
