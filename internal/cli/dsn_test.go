package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for _, tt := range [][2]string{
		{"host=h password = s3cret dbname=x", "host=h password=xxxxx dbname=x"},
		{"  host = h\tpassword='a b\\'c d'  user=u ", "host=h password=xxxxx user=u"},
		{"host=h sslpassword=s3cret application_name='my app'", "host=h sslpassword=xxxxx application_name='my app'"},
		{"postgres://u:s3cret@h:5433/db?sslmode=disable", "postgres://u:xxxxx@h:5433/db?sslmode=disable"},
		{"postgresql://u@h/db?password=s3cret&sslpassword=p2", "postgresql://u@h/db?password=xxxxx&sslpassword=xxxxx"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"", ""},
	} {
		require.Equal(t, tt[1], redactDSN(tt[0]), tt[0])
	}
	for _, tt := range []struct{ dsn, why string }{
		{"postgres://u:s3cret@h:notaport/x", "invalid port"},
		{"postgres://u:pw/rest@h/x", "invalid port"},
		{"postgres://u:s3cret@h/%zz", "failed to parse as URL (invalid percent-encoded token)"},
		{"host=h password='s3cret", "failed to parse as keyword/value (unterminated quoted string in connection info string)"},
		{"host=h password=s3cret port=x", "invalid port"},
	} {
		got := redactDSN(tt.dsn)
		require.Equal(t, "<unparseable DSN: "+tt.why+">", got, tt.dsn)
		require.NotContains(t, got, "s3cret")
	}
}

func TestScrubDSN(t *testing.T) {
	t.Parallel()
	require.Equal(t, "auth failed for xxxxx and xxxxx",
		scrubDSN("auth failed for s3 cret and 's3 cret'", "host=h password='s3 cret'", ""))
	require.Equal(t, "bad xxxxx", scrubDSN("bad pw/rest", "postgres://u:pw/rest@h/x", ""))
	require.Equal(t, "refused xxxxx", scrubDSN("refused fromenv", "", "fromenv"))
}

// FuzzRedactDSN writes a password into a DSN in either form, as a user
// would (quoted, escaped, percent-encoded), and checks that pgconn reads it
// back and that the redacted DSN does not contain it.
func FuzzRedactDSN(f *testing.F) {
	for _, s := range []string{"s3cret", "a b'c", `back\slash`, "p@ss:w/rd?#", "=x= ", "ünï cødé"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, password string, asURL bool) {
		if len(password) < 4 || strings.ContainsRune(password, 0) || strings.TrimSpace(password) != password {
			return
		}
		var dsn string
		if asURL {
			dsn = "postgres://" + url.UserPassword("app", password).String() + "@db.example:5432/orders?sslmode=disable"
		} else {
			quoted := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password)
			dsn = "host=db.example port=5432 user=app password='" + quoted + "' dbname=orders sslmode=disable"
		}
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("%q does not parse: %v", dsn, err)
		}
		if cfg.Password != password {
			t.Fatalf("%q read back as %q", password, cfg.Password)
		}
		shown := redactDSN(dsn)
		if strings.Contains(shown, password) {
			t.Fatalf("%q shows the password: %s", dsn, shown)
		}
		if !strings.Contains(shown, "db.example") {
			t.Fatalf("%q shows nothing useful: %s", dsn, shown)
		}
	})
}

func TestJSONLogDurationsAsText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger, err := (&logFlags{format: "json", level: "info"}).logger(&buf)
	require.NoError(t, err)
	logger.Info("x", slog.Duration("lease", 1500*time.Millisecond), slog.Any("wait", 2*time.Minute),
		slog.Group("g", slog.Duration("d", time.Millisecond)), slog.Int("n", 3))
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
	require.Equal(t, "1.5s", rec["lease"])
	require.Equal(t, "2m0s", rec["wait"])
	require.Equal(t, map[string]any{"d": "1ms"}, rec["g"])
	require.Equal(t, float64(3), rec["n"])
}
