package httpsink

import "github.com/outboxd/outbox/sink/sinkutil"

// reservedHeaders are the request headers a message's own headers may not
// set. Besides the headers the sink writes, they cover those that would
// change how the request is framed, routed, authenticated or decoded, and
// webhook-* even when requests are not signed, so a receiver never sees a
// signature the sink did not make.
var reservedHeaders = sinkutil.Reserved{
	Names: []string{
		"Authorization", "Proxy-Authorization", "Host", "Idempotency-Key",
		"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Expect", "Accept-Encoding", "Cookie",
	},
	Prefixes: []string{"Content-", "Ce-", "Outbox-", "Webhook-", "Proxy-"},
}
