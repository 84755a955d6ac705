package httpsink_test

import (
	"testing"

	"github.com/outboxd/outbox/sink/httpsink"
	"github.com/outboxd/outbox/sink/sinktest"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	// The query belongs to the endpoint: any key, repeated or not, passes.
	sinktest.CheckURLs(t, httpsink.CheckURL, func(u string) error { _, err := httpsink.New(u, nil); return err },
		"https://u:s3cr3t@h/hook?a=1&a=2&timeout=x", []sinktest.URLCase{
			{"NoScheme", "h/hook", "httpsink: URL has no scheme"},
			{"WrongScheme", "ftp://u:s3cr3t@h/", `httpsink: unsupported URL scheme "ftp"`},
			{"NoHost", "https:///hook", "httpsink: URL has no host"},
			{"SecretNotEchoed", "https://u:s3cr3t@h:port/", "httpsink: malformed URL"},
			{"SigningSecretRefused", "https://h/hook?k=whsec_s3cr3t", "Options.Secrets"},
		})
}
