package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxd/outbox/console"
)

func TestAuth(t *testing.T) {
	t.Parallel()
	creds := console.Credentials{Token: testToken, User: "ops", Password: "pa55word"}
	b := setup(t, console.Config{Credentials: creds})

	t.Run("APIRequiresCredentials", func(t *testing.T) {
		t.Parallel()
		for _, auth := range []func(*http.Request){nil, bearer("wrong"), basic("ops", "wrong"), basic("root", "pa55word")} {
			r := b.client(t, auth).get("/api/v1/status")
			require.Equal(t, http.StatusUnauthorized, r.code, r.body)
			require.Equal(t, "unauthorized", errorCode(t, r))
			require.Contains(t, r.header.Values("WWW-Authenticate"), `Bearer realm="outboxd console"`)
		}
	})
	t.Run("BearerAndBasicAccepted", func(t *testing.T) {
		t.Parallel()
		for _, auth := range []func(*http.Request){bearer(testToken), basic("ops", "pa55word")} {
			r := b.client(t, auth).get("/api/v1/status")
			require.Equal(t, http.StatusOK, r.code, r.body)
		}
	})
	t.Run("PagesRedirectToLogin", func(t *testing.T) {
		t.Parallel()
		r := b.client(t, nil).get("/t/" + b.table + "/?x=1")
		require.Equal(t, http.StatusSeeOther, r.code)
		require.Equal(t, "/login?next="+url.QueryEscape("/t/"+b.table+"/?x=1"), r.header.Get("Location"))
	})
	t.Run("LoginOpensSession", func(t *testing.T) {
		t.Parallel()
		c := b.client(t, nil)
		c.login(url.Values{"token": {testToken}})
		require.Equal(t, http.StatusOK, c.get("/api/v1/status").code)
		c2 := b.client(t, nil)
		c2.login(url.Values{"user": {"ops"}, "password": {"pa55word"}})
		page := c2.get("/")
		require.Contains(t, page.body, "ops · sign out")
	})
	t.Run("WrongLoginRefused", func(t *testing.T) {
		t.Parallel()
		c := b.client(t, nil)
		r := c.do(http.MethodPost, "/login", "token=nope", func(r *http.Request) {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		})
		require.Equal(t, http.StatusUnauthorized, r.code)
		require.Contains(t, r.body, "Wrong credentials")
		require.Equal(t, http.StatusUnauthorized, c.get("/api/v1/status").code)
	})
	t.Run("LoginRedirectStaysOnConsole", func(t *testing.T) {
		t.Parallel()
		b := setup(t, console.Config{Credentials: creds, SignInBurst: 100}) // a login per case
		// Browsers drop tabs and newlines from a URL and read a backslash
		// as a slash: each of these is another host to them.
		for _, next := range []string{"//evil.example/", "/\t/evil.example/", "/\n/evil.example/", "/\r/evil.example",
			"/\\evil.example", "/\t\\evil.example", "https://evil.example/", "evil.example", "/%09/evil.example", "/\x7f/evil.example"} {
			c := b.client(t, nil)
			r := c.do(http.MethodPost, "/login", url.Values{"token": {testToken}, "next": {next}}.Encode(), func(r *http.Request) {
				r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			})
			require.Equal(t, http.StatusSeeOther, r.code, "%q", next)
			loc := r.header.Get("Location")
			require.True(t, loc == "/" || loc == "/%09/evil.example", "next %q redirected to %q", next, loc)
		}
		c := b.client(t, nil)
		r := c.do(http.MethodPost, "/login", url.Values{"token": {testToken}, "next": {"/t/outbox/dead?q=a b"}}.Encode(), func(r *http.Request) {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		})
		require.Equal(t, "/t/outbox/dead?q=a b", r.header.Get("Location"), "a path of the console is kept")
	})
	t.Run("SecretsNeverLogged", func(t *testing.T) {
		t.Parallel()
		c := b.client(t, nil)
		c.login(url.Values{"token": {testToken}})
		b.client(t, bearer(testToken+"x")).get("/api/v1/status")
		b.client(t, basic("ops", "pa55word")).get("/")
		require.NotContains(t, b.logs.String(), testToken)
		require.NotContains(t, b.logs.String(), "pa55word")
	})
}

func TestNewRefusesUnsafeConfigs(t *testing.T) {
	t.Parallel()
	_, err := console.New(nil, &console.Config{Tables: []string{"outbox"}})
	require.ErrorContains(t, err, "credentials are required")
	_, err = console.New(nil, &console.Config{Tables: []string{"outbox"}, Insecure: true, Write: true})
	require.ErrorContains(t, err, "credentials are required")
	_, err = console.New(nil, &console.Config{Tables: []string{"outbox"}, Credentials: console.Credentials{User: "ops"}})
	require.ErrorContains(t, err, "go together")
	_, err = console.New(nil, &console.Config{Tables: []string{"outbox"}, Insecure: true})
	require.NoError(t, err)
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	c := b.client(t, bearer(testToken))
	base := "/api/v1/tables/" + b.table
	for _, path := range []string{base + "/dead/retry", base + "/dead/skip", base + "/replay", "/api/v1/jobs/1/cancel"} {
		r := c.do(http.MethodPost, path, map[string]any{"filter": map[string]any{}})
		require.Equal(t, http.StatusForbidden, r.code, path)
		require.Equal(t, "read_only", errorCode(t, r), path)
		// The hint names the flags that exist: console --write, run --console-write.
		require.Contains(t, r.body, "outboxd console with --write", path)
		require.Contains(t, r.body, "outboxd run with --console-write", path)
	}
	page := b.client(t, nil)
	page.login(url.Values{"token": {testToken}})
	require.Contains(t, page.get("/").body, "read-only")
	for _, p := range []string{"/t/" + b.table + "/dead", "/t/" + b.table + "/replay"} {
		body := page.get(p).body
		require.Contains(t, body, "outboxd console with --write", p)
		require.NotContains(t, body, "start the console with --console-write", p)
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Write: true, Credentials: console.Credentials{Token: testToken, User: "ops", Password: "pw"}})
	retry := "/api/v1/tables/" + b.table + "/dead/retry"
	body := map[string]any{"ids": []int64{1}}
	c := b.client(t, nil)
	tok := c.login(url.Values{"token": {testToken}})
	withCSRF := func(v string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set(console.CSRFHeader, v) }
	}
	header := func(k, v string) func(*http.Request) { return func(r *http.Request) { r.Header.Set(k, v) } }

	refused := []struct {
		name string
		c    *client
		mods []func(*http.Request)
		code string
	}{
		{"SessionWithoutToken", c, nil, "csrf"},
		{"SessionWrongToken", c, []func(*http.Request){withCSRF(tok + "x")}, "csrf"},
		{"OtherSessionsToken", b.client(t, nil), []func(*http.Request){withCSRF(tok)}, "unauthorized"},
		{"CrossOrigin", c, []func(*http.Request){withCSRF(tok), header("Origin", "https://evil.example")}, "cross_site"},
		{"CrossSite", c, []func(*http.Request){withCSRF(tok), header("Sec-Fetch-Site", "cross-site")}, "cross_site"},
		{"BasicAuthWithoutSession", b.client(t, basic("ops", "pw")), nil, "csrf"},
	}
	for _, tc := range refused {
		r := tc.c.do(http.MethodPost, retry, body, tc.mods...)
		require.Contains(t, []int{http.StatusForbidden, http.StatusUnauthorized}, r.code, tc.name)
		require.Equal(t, tc.code, errorCode(t, r), tc.name)
	}
	// The same request with the session's token, from the console's origin,
	// passes the checks; so does a bearer token, which no browser attaches
	// by itself.
	r := c.do(http.MethodPost, retry, body, withCSRF(tok), header("Origin", b.srv.URL), header("Sec-Fetch-Site", "same-origin"))
	require.NotEqual(t, http.StatusForbidden, r.code, r.body)
	r = b.client(t, bearer(testToken)).do(http.MethodPost, retry, body)
	require.NotEqual(t, http.StatusForbidden, r.code, r.body)
	// A cross-site sign-in form is refused too.
	r = b.client(t, nil).do(http.MethodPost, "/login", "token="+testToken, header("Content-Type", "application/x-www-form-urlencoded"), header("Origin", "https://evil.example"))
	require.Equal(t, http.StatusForbidden, r.code)
}

func TestSecureHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	c := b.client(t, bearer(testToken))
	for _, path := range []string{"/", "/api/v1/status", "/static/console.js", "/login"} {
		r := c.get(path)
		require.Equal(t, http.StatusOK, r.code, path)
		csp := r.header.Get("Content-Security-Policy")
		require.Contains(t, csp, "frame-ancestors 'none'", path)
		require.Contains(t, csp, "script-src 'self'", path)
		require.NotContains(t, csp, "unsafe-inline", path)
		require.NotContains(t, csp, "unsafe-eval", path)
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"), path)
		require.Equal(t, "DENY", r.header.Get("X-Frame-Options"), path)
	}
	// No inline script or style anywhere in the pages: the CSP would block it.
	page := c.get("/").body
	require.NotRegexp(t, `<script(?:\s[^>]*)?>[^<]`, page)
	require.NotContains(t, page, "style=")
	require.NotContains(t, strings.ToLower(page), "<style")
}

// Behind a proxy that terminates TLS, the browser speaks HTTPS: the
// session cookie is Secure (and HttpOnly, SameSite=Strict) and every
// answer carries HSTS. Over plain HTTP neither, or a browser reaching the
// console by http:// could never sign in.
func TestHTTPSCookiesAndHSTS(t *testing.T) {
	t.Parallel()
	// signIn posts the form: the answer's headers and cookies.
	signIn := func(b *testBundle) (http.Header, []*http.Cookie) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/login", strings.NewReader("token="+testToken))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.srv.URL)
		resp, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		return resp.Header, resp.Cookies()
	}
	cookieOf := func(cookies []*http.Cookie) *http.Cookie {
		for _, c := range cookies {
			if c.Name == "outboxd_console" {
				return c
			}
		}
		require.FailNow(t, "no session cookie set")
		return nil
	}

	proxied := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}, BehindTLSProxy: true})
	header, cookies := signIn(proxied)
	c := cookieOf(cookies)
	require.True(t, c.Secure, "Secure")
	require.True(t, c.HttpOnly, "HttpOnly")
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "max-age=31536000", header.Get("Strict-Transport-Security"))
	for _, path := range []string{"/login", "/static/console.js", "/nope"} {
		r := proxied.client(t, nil).get(path)
		require.Equal(t, "max-age=31536000", r.header.Get("Strict-Transport-Security"), path)
	}

	plain := setup(t, console.Config{Credentials: console.Credentials{Token: testToken}})
	header, cookies = signIn(plain)
	require.False(t, cookieOf(cookies).Secure)
	require.Empty(t, header.Get("Strict-Transport-Security"))
}
