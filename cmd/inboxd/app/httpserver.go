package app

import (
	"time"

	"github.com/inboxd/inboxd/internal/httpserve"
)

// The limits of the daemon's HTTP server (/metrics, /healthz, /readyz and
// the console) and of `inboxd ui`'s. Without them idle keep-alive
// connections were kept for ever (186 of them to /healthz used up a
// 200-descriptor limit), and without a read timeout 64 requests with a
// Content-Length and no body held every place of the cap: /healthz did not
// answer for 75 s.
const (
	// httpReadHeaderTimeout bounds reading a request's headers.
	httpReadHeaderTimeout = 5 * time.Second
	// httpReadTimeout bounds reading a whole request: the console's forms
	// are the only bodies, and they are small.
	httpReadTimeout = 10 * time.Second
	// httpIdleTimeout closes a keep-alive connection that has waited this
	// long for its next request. Scrapers and probes that come less often
	// simply connect again.
	httpIdleTimeout = 30 * time.Second
	// httpWriteTimeout bounds a request from the end of its headers to the
	// end of the response (a /metrics scrape, /readyz's database ping).
	httpWriteTimeout = 30 * time.Second
	// httpMaxConns caps the connections held at once. At the cap, a new
	// connection closes the one that has waited longest with no request in
	// a handler (see internal/httpserve), so a probe is served whatever
	// other clients hold. Prometheus and the probes need a handful.
	httpMaxConns = 64
)

// defaultHTTPServerLimits are the limits runDaemon and runUI serve with;
// tests inject shorter ones.
func defaultHTTPServerLimits() httpserve.Limits {
	return httpserve.Limits{
		ReadHeader: httpReadHeaderTimeout,
		Read:       httpReadTimeout,
		Idle:       httpIdleTimeout,
		Write:      httpWriteTimeout,
		MaxConns:   httpMaxConns,
	}
}
