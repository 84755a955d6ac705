package console

import (
	"embed"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

//go:embed templates/*.html static
var assets embed.FS

// Version is shown in the page footer; the command line sets it.
var Version = "dev"

var funcs = template.FuncMap{
	"num":  formatInt,
	"age":  formatAge,
	"when": formatWhen,
	"deref": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
}

// pageTemplates holds one template set per page: the layout plus the page's
// "content".
var pageTemplates = func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, name := range []string{"overview", "messages", "message", "dead", "deadtop", "replay", "audit", "error"} {
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(assets,
			"templates/layout.html", "templates/filters.html", "templates/breakdowns.html", "templates/"+name+".html"))
	}
	out["login"] = template.Must(template.New("login").Funcs(funcs).ParseFS(assets, "templates/login.html"))
	return out
}()

// pageData is what every page's layout needs.
type pageData struct {
	Title, Page, Table, Actor, CSRF, Version string
	Tables                                   []TableView
	Write                                    bool
}

// pageHandler renders a page for an authenticated principal.
type pageHandler func(w http.ResponseWriter, r *http.Request, t *table, base pageData)

// page authenticates a page request (redirecting to the login form), makes
// sure the browser has a session (the CSRF token's anchor) and resolves the
// table.
func (s *Server) page(h pageHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok, wait := s.authenticateLimited(r)
		if wait > 0 {
			w.Header().Set("Retry-After", retryAfter(wait))
			http.Error(w, "too many failed authentications from this address; try again later", http.StatusTooManyRequests)
			return
		}
		if !ok {
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		sess := p.session
		if sess == nil {
			sess = s.sessions.open(w, r, p.actor, s.cfg.https())
		}
		t := s.lookup(r.PathValue("table"))
		if t == nil {
			http.Error(w, "the console does not serve this table (or none yet)", http.StatusNotFound)
			return
		}
		actor := p.actor
		if s.cfg.Credentials.empty() {
			actor = ""
		}
		base := pageData{Table: t.name, Actor: actor, CSRF: sess.csrf, Version: Version, Tables: s.tableViews(), Write: s.cfg.Write}
		h(w, r, t, base)
	}
}

func (s *Server) render(w http.ResponseWriter, name string, data any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := pageTemplates[name].ExecuteTemplate(&b, templateRoot(name), data); err != nil {
		s.logger.Error("console: rendering page", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte(b.String()))
}

func templateRoot(name string) string {
	if name == "login" {
		return "login"
	}
	return "layout"
}

// pageError renders an error inside the layout (bad filter, unknown id...).
func (s *Server) pageError(w http.ResponseWriter, base pageData, status int, msg string) {
	w.WriteHeader(status)
	base.Title, base.Page = "Error", "error"
	s.render(w, "error", struct {
		pageData
		Err string
	}{base, msg})
}

func formatInt(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func formatAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

// formatWhen is every time the console shows, in one format: UTC, ISO
// 8601 to the millisecond, in a <time> element whose title the page's
// script sets to the reader's local time (shown on hover). "—" for none.
func formatWhen(v any) template.HTML {
	var t time.Time
	switch x := v.(type) {
	case time.Time:
		t = x
	case *time.Time:
		if x == nil {
			return "—"
		}
		t = *x
	default:
		return template.HTML(template.HTMLEscapeString(fmt.Sprint(v)))
	}
	if t.IsZero() {
		return "—"
	}
	s := t.UTC().Format("2006-01-02T15:04:05.000Z")
	return template.HTML(`<time datetime="` + s + `">` + s + `</time>`)
}
