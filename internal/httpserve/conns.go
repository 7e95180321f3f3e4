package httpserve

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// capListener holds at most max connections at once. When a new one comes
// and the cap is reached, it closes a connection that waits on its client
// with no request being served: idle between requests, still sending its
// headers or its TLS handshake (see victimLocked for which). Such a
// connection does nothing a client is waiting for, and the new one may be
// a probe. A connection the server has not read yet, or whose request it
// is parsing, is not waiting on its client; one whose headers are read is
// being served until its answer is written. Those are never closed. Only
// when no connection waits does a new one wait for a place. Connections
// are counted from Accept to Close.
type capListener struct {
	net.Listener
	max int
	log zerolog.Logger

	waiters atomic.Int32 // Accepts waiting for a place: they want to hear of every change

	mu     sync.Mutex
	cond   *sync.Cond // signalled when a connection closes, starts waiting on its client, or goes idle
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
	if len(l.conns) >= l.max {
		// Counted before the first look for a victim: a connection that
		// starts waiting on its client after the look sees the count and
		// wakes this Accept (no wake-up is lost between the look and Wait).
		l.waiters.Add(1)
		defer l.waiters.Add(-1)
	}
	for len(l.conns) >= l.max {
		if l.closed {
			_ = c.Close()
			return nil, net.ErrClosed
		}
		if v, since := l.victimLocked(); v != nil {
			delete(l.conns, v)
			_ = v.Conn.Close()
			l.log.Debug().Str("remote", v.RemoteAddr().String()).Int("max_conns", l.max).
				Dur("waited", time.Since(time.Unix(0, since))).Msg("http connection closed to make room: it was waiting on its client, with no request being served")
			continue
		}
		l.cond.Wait()
	}
	tc := &trackedConn{Conn: c, l: l}
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

// victimLocked returns the connection to close to make room and since
// when it waited (Unix nanoseconds), or nil when none waits on its client.
// It is the one that has waited longest among those that have sent
// something (idle after an answer, or part of their headers), and only if
// none has, among those that have sent nothing yet: a new connection whose
// request is on its way (a probe) is never closed while a slow or idle one
// holds a place.
func (l *capListener) victimLocked() (*trackedConn, int64) {
	var v *trackedConn
	var vs int64
	vsent := false
	for c := range l.conns {
		s := c.waitingSince()
		if s == 0 {
			continue
		}
		sent := c.got.Load() > 0
		if v == nil || (sent && !vsent) || (sent == vsent && s < vs) {
			v, vs, vsent = c, s, sent
		}
	}
	return v, vs
}

// changed wakes the Accepts waiting for a place, if any.
func (l *capListener) changed() {
	if l.waiters.Load() > 0 {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// trackedConn is a connection of a capListener.
type trackedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
	// serving is set while a request of the connection is being served:
	// from the end of its headers until its answer is written (the server
	// reports both: connState). reading is when (Unix nanoseconds) its
	// Read in progress began, 0 for none.
	serving atomic.Bool
	reading atomic.Int64
	// got counts the bytes read from it.
	got atomic.Int64
}

// waitingSince is since when the connection waits on its client with no
// request being served (Unix nanoseconds), or 0. The server's read that
// watches for a client leaving during a handler does not count: the
// request is being served.
func (c *trackedConn) waitingSince() int64 {
	if c.serving.Load() {
		return 0
	}
	return c.reading.Load()
}

// Read reads, marked as waiting on the client while it blocks.
func (c *trackedConn) Read(p []byte) (int, error) {
	c.reading.Store(time.Now().UnixNano())
	c.l.changed()
	n, err := c.Conn.Read(p)
	c.got.Add(int64(n))
	c.reading.Store(0)
	return n, err
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

// connState is the server's ConnState hook: a connection is being served
// from when its request's headers are read (active) until its answer is
// written (idle again, or closed).
func connState(c net.Conn, st http.ConnState) {
	tc := trackedOf(c)
	if tc == nil {
		return
	}
	switch st {
	case http.StateActive:
		tc.serving.Store(true)
	case http.StateIdle:
		tc.serving.Store(false)
		tc.l.changed()
	}
}

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
