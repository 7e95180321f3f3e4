// Package httpserve builds every HTTP server inboxd runs: the daemon's
// (/metrics, /healthz, /readyz and the console) and the webhook listener.
// Each gets, from one place:
//
//   - header, read, write and idle timeouts (Limits; every one must be set);
//   - a connection cap that never starves a new request: when the cap is
//     reached, the connection that has waited longest on its client with
//     no request being served (idle between requests, still sending its
//     headers or its TLS handshake) is closed to make room; a connection
//     not read yet, or whose request is being served, never is; only when
//     no connection waits on its client does a new one wait for a place;
//   - answers that close the connection when the handler did not read the
//     request's body to its end, so that no body a handler refused is read
//     (or waited for) after its answer;
//   - the server's own errors (bad requests, TLS handshakes) logged at
//     debug level: a client can cause them at will.
//
// PacedBody is the one rule for how slowly a request body may arrive.
package httpserve

import (
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// Limits bound an HTTP server. Every timeout must be positive.
type Limits struct {
	// ReadHeader bounds reading a request's headers.
	ReadHeader time.Duration
	// Read bounds reading a whole request, its body included.
	Read time.Duration
	// Write bounds a request from the end of its headers to the end of its
	// answer.
	Write time.Duration
	// Idle closes a kept-alive connection that has waited this long for its
	// next request.
	Idle time.Duration
	// MaxHeaderBytes caps a request's headers; 0 is net/http's default
	// (1 MiB).
	MaxHeaderBytes int
	// MaxConns caps the connections held at once; 0 is no cap.
	MaxConns int
}

// Validate reports every limit that is not set, one line each.
func (l Limits) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{"read header": l.ReadHeader, "read": l.Read, "write": l.Write, "idle": l.Idle} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("httpserve: the %s timeout must be positive, got %s", name, d))
		}
	}
	if l.MaxConns < 0 || l.MaxHeaderBytes < 0 {
		errs = append(errs, fmt.Errorf("httpserve: the connection cap and header size must not be negative"))
	}
	return errors.Join(errs...)
}

// Server is an http.Server built by New; Serve it with its own Serve.
type Server struct {
	*http.Server
	limits Limits
	log    zerolog.Logger
}

// New returns the server of h with the limits l; log takes the server's
// own errors (at debug level) and the connections the cap closes. It
// panics when l does not validate: the limits are the program's, never an
// operator's input.
func New(h http.Handler, l Limits, log zerolog.Logger) *Server {
	if err := l.Validate(); err != nil {
		panic(err)
	}
	s := &Server{limits: l, log: log}
	s.Server = &http.Server{
		Handler:           closeUnread(h),
		ReadHeaderTimeout: l.ReadHeader,
		ReadTimeout:       l.Read,
		WriteTimeout:      l.Write,
		IdleTimeout:       l.Idle,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          stdlog.New(errorLog{log}, "", 0),
	}
	if l.MaxConns > 0 {
		s.ConnState = connState
	}
	return s
}

// Serve serves on ln, capped at Limits.MaxConns connections, until the
// server is shut down or closed; it returns http.ErrServerClosed then.
func (s *Server) Serve(ln net.Listener) error { return s.ServeTLSConfig(ln, nil) }

// ServeTLSConfig is Serve over TLS with tc (nil: plain HTTP): the cap
// counts the TCP connections under TLS, so that a client that never ends
// its handshake is one of those it closes first.
func (s *Server) ServeTLSConfig(ln net.Listener, tc *tls.Config) error {
	if s.limits.MaxConns > 0 {
		ln = newCapListener(ln, s.limits.MaxConns, s.log)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return s.Server.Serve(ln)
}

// errorLog sends the server's own errors to the logger at debug level.
type errorLog struct{ log zerolog.Logger }

func (l errorLog) Write(p []byte) (int, error) {
	l.log.Debug().Msg(strings.TrimSpace(string(p)))
	return len(p), nil
}
