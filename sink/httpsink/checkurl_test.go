package httpsink_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/sink/httpsink"
)

func TestCheckURL(t *testing.T) {
	t.Parallel()
	// The query belongs to the endpoint: any key, repeated or not, passes.
	require.NoError(t, httpsink.CheckURL("https://u:s3cr3t@h/hook?a=1&a=2&timeout=x"))
	for _, tt := range []struct{ name, url, want string }{
		{"NoScheme", "h/hook", "httpsink: URL has no scheme"},
		{"WrongScheme", "ftp://u:s3cr3t@h/", `httpsink: unsupported URL scheme "ftp"`},
		{"NoHost", "https:///hook", "httpsink: URL has no host"},
		{"SecretNotEchoed", "https://u:s3cr3t@h:port/", "httpsink: malformed URL"},
		{"SigningSecretRefused", "https://h/hook?k=whsec_s3cr3t", "Options.Secrets"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := httpsink.CheckURL(tt.url)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "s3cr3t")
			_, newErr := httpsink.New(tt.url, nil)
			require.EqualError(t, newErr, err.Error(), "CheckURL reports what New does")
		})
	}
}
