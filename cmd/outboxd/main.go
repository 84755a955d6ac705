// Command outboxd relays a PostgreSQL transactional outbox to webhooks,
// brokers or stdout. Run `outboxd help` for the commands.
package main

import (
	"context"
	"os"

	"github.com/outboxd/outbox/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
