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

// NotSent says why the webhook sink would leave a producer header out of
// its requests ("" when it sends it): a name the sink or HTTP reserves, a
// name that is not an HTTP token, or a value with a control character (a
// line break would split the header). The console shows it beside the
// header; a sink reports each one it leaves out (outbox.Message.DropHeader).
func NotSent(name, value string) string {
	switch {
	case name == "":
		return "an empty name"
	case !validHeaderName(name):
		return "not a valid HTTP header name"
	case reservedHeaders.Has(name):
		return "a name the webhook sink sets itself or HTTP reserves"
	case !validHeaderValue(value):
		return "a value with a line break or another control character"
	}
	return ""
}
