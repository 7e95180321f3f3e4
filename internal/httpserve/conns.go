package httpserve

import (
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// capListener holds at most max connections at once. When a new one comes
// and the cap is reached, it closes the connection that has waited longest
// without a request in a handler (idle between requests, still sending its
// headers or its TLS handshake, or holding back a body after its answer):
// such a connection does nothing a client is waiting for, and the new one
// may be a probe. Only when every connection is inside a handler does the
// new one wait for a place. Connections are counted from Accept to Close.
type capListener struct {
	net.Listener
	max int
	log zerolog.Logger

	mu     sync.Mutex
	cond   *sync.Cond // signalled when a connection closes or leaves a handler
	conns  map[*trackedConn]struct{}
	closed bool
}

func newCapListener(ln net.Listener, max int, log zerolog.Logger) *capListener {
	l := &capListener{Listener: ln, max: max, log: log, conns: make(map[*trackedConn]struct{}, max)}
	l.cond = sync.NewCond(&l.mu)
	return l
}

// Accept accepts the next connection and, at the cap, makes room for it.
func (l *capListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.conns) >= l.max {
		if l.closed {
			_ = c.Close()
			return nil, net.ErrClosed
		}
		if v := l.victimLocked(); v != nil {
			delete(l.conns, v)
			_ = v.Conn.Close()
			l.log.Debug().Str("remote", v.RemoteAddr().String()).Int("max_conns", l.max).
				Dur("waited", time.Since(v.since)).Msg("http connection closed to make room: none of its requests was in a handler")
			continue
		}
		l.cond.Wait()
	}
	tc := &trackedConn{Conn: c, l: l, since: time.Now()}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// Close closes the listener and wakes an Accept waiting for a place.
func (l *capListener) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// victimLocked returns the connection that has waited longest outside a
// handler, or nil when every one is inside one.
func (l *capListener) victimLocked() *trackedConn {
	var v *trackedConn
	for c := range l.conns {
		if c.busy == 0 && (v == nil || c.since.Before(v.since)) {
			v = c
		}
	}
	return v
}

// trackedConn is a connection of a capListener.
type trackedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
	// busy counts its requests inside a handler; since is when it was
	// accepted or its last request left its handler. Both under l.mu.
	busy  int
	since time.Time
}

// Close closes the connection and frees its place.
func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.cond.Broadcast()
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// enter and exit bracket a request's handler.
func (c *trackedConn) enter() {
	c.l.mu.Lock()
	c.busy++
	c.l.mu.Unlock()
}

func (c *trackedConn) exit() {
	c.l.mu.Lock()
	c.busy--
	c.since = time.Now()
	c.l.cond.Broadcast()
	c.l.mu.Unlock()
}

// connKey is the request context's key of its trackedConn.
type connKey struct{}

// trackedOf returns the trackedConn under c (a TLS connection's included),
// or nil.
func trackedOf(c net.Conn) *trackedConn {
	for {
		switch x := c.(type) {
		case *trackedConn:
			return x
		case interface{ NetConn() net.Conn }:
			c = x.NetConn()
		default:
			return nil
		}
	}
}

// inHandler marks the request's connection as inside a handler while h
// runs.
func inHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*trackedConn); ok {
			c.enter()
			defer c.exit()
		}
		h.ServeHTTP(w, r)
	})
}
