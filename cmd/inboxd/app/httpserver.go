package app

import (
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"
)

// The limits of the HTTP server of /metrics, /healthz and /readyz. Without
// them idle keep-alive connections were kept for ever: 186 of them to
// /healthz used up a 200-descriptor limit, /metrics became unreachable and
// the workers' dials to http routes failed with "too many open files".
const (
	// httpReadHeaderTimeout bounds reading a request's headers.
	httpReadHeaderTimeout = 5 * time.Second
	// httpIdleTimeout closes a keep-alive connection that has waited this
	// long for its next request. Scrapers and probes that come less often
	// simply connect again.
	httpIdleTimeout = 30 * time.Second
	// httpWriteTimeout bounds a request from the end of its headers to the
	// end of the response (a /metrics scrape, /readyz's database ping).
	httpWriteTimeout = 30 * time.Second
	// httpMaxConns caps the connections served at once; more wait in the
	// listen backlog, which costs the process no file descriptor, until one
	// closes. Prometheus and the probes need a handful.
	httpMaxConns = 64
)

// httpServerLimits bounds the HTTP server; runDaemon serves with
// defaultHTTPServerLimits, tests inject shorter ones.
type httpServerLimits struct {
	readHeader, idle, write time.Duration
	maxConns                int
}

// defaultHTTPServerLimits are the limits runDaemon serves with.
func defaultHTTPServerLimits() httpServerLimits {
	return httpServerLimits{
		readHeader: httpReadHeaderTimeout,
		idle:       httpIdleTimeout,
		write:      httpWriteTimeout,
		maxConns:   httpMaxConns,
	}
}

// newHTTPServer returns the server for h with the limits l, and the listener
// to serve it on: ln, accepting at most l.maxConns connections at once.
func newHTTPServer(ln net.Listener, h http.Handler, l httpServerLimits) (*http.Server, net.Listener) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.readHeader,
		IdleTimeout:       l.idle,
		WriteTimeout:      l.write,
	}
	return srv, netutil.LimitListener(ln, l.maxConns)
}
