// Package console serves outboxd's web console: server-rendered pages for
// operators (overview, messages, message detail, dead letters, replay, audit)
// and the JSON API under /api/v1/ those pages use, for one or several outbox
// tables. Assets are embedded; nothing is fetched from elsewhere.
//
// The console is read-only unless [Config.Write] is set. Requests are
// authenticated by a bearer token or basic auth ([Credentials]); writes from
// a browser session carry a CSRF token tied to the session and must come from
// the console's own origin. Every write is audited: a log line and a row in
// the table's audit table. Bulk actions run as tracked jobs with progress and
// cancel. docs/api.md describes every endpoint.
package console
