// Package netfault puts an in-process TCP proxy between a client and a
// server so tests can degrade the network between them: add latency, cut
// every connection, or black-hole traffic.
//
// It is test infrastructure: the worker tests and the fault suite put it
// between the daemon and PostgreSQL. It is written on the standard library
// alone (it used to wrap toxiproxy, which pulled toxiproxy and its
// dependencies into the module graph of every program embedding inboxd) and
// imports nothing from inboxd, so any package's tests may use it.
package netfault

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// dialTimeout bounds the proxy's connection to the upstream.
const dialTimeout = 5 * time.Second

// chunkSize is the largest piece read from one side before it is forwarded.
const chunkSize = 32 << 10

// Proxy forwards TCP connections from Addr to an upstream address. Faults
// apply to every connection, open and future, until Restore.
type Proxy struct {
	upstream string
	ln       net.Listener
	latency  atomic.Int64 // nanoseconds added to each chunk from the upstream
	done     chan struct{}
	wg       sync.WaitGroup

	mu     sync.Mutex
	cut    bool // Cut: new connections are closed at once
	hole   bool // BlackHole: data is dropped
	closed bool
	links  map[*link]struct{}
}

// link is one client connection and its upstream connection.
type link struct {
	client, server net.Conn
	holed          atomic.Bool // lived through a black hole: Restore closes it
	once           sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		l.client.Close()
		l.server.Close()
	})
}

// New starts a proxy on a free loopback port that forwards to upstream
// (host:port). Close it when done.
func New(upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netfault: listen: %w", err)
	}
	p := &Proxy{upstream: upstream, ln: ln, done: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Latency delays the data flowing from the upstream to clients by d (so each
// round trip takes d longer), on open connections and new ones, until
// Restore. Requests themselves are not delayed.
func (p *Proxy) Latency(d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("netfault: negative latency %s", d)
	}
	p.latency.Store(int64(d))
	return nil
}

// BlackHole stops all data in both directions without closing anything, as
// a silent network partition does, until Restore: connections stay open and
// new ones are accepted, but no byte passes. Data sent meanwhile is lost, so
// Restore closes the connections that lived through it.
func (p *Proxy) BlackHole() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
	for l := range p.links {
		l.holed.Store(true)
	}
	return nil
}

// Cut closes every open connection and refuses new ones (they are accepted
// and closed at once) until Restore, as a stopped server or a firewall
// reset does.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	p.closeLinks(func(*link) bool { return true })
}

// CutConnections closes every open connection at once (both sides see the
// connection drop) and keeps accepting new ones, as a failover or a
// restarted load balancer does.
func (p *Proxy) CutConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLinks(func(*link) bool { return true })
}

// Restore removes every fault: no latency, no black hole (the connections
// that lived through one are closed), and after Cut new connections are
// forwarded again.
func (p *Proxy) Restore() error {
	p.latency.Store(0)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	if p.hole {
		p.hole = false
		p.closeLinks(func(l *link) bool { return l.holed.Load() })
	}
	return nil
}

// Close stops the proxy, closes its connections and waits for its
// goroutines to end.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	p.closeLinks(func(*link) bool { return true })
	p.mu.Unlock()
	p.wg.Wait()
}

// closeLinks closes the links that match; p.mu is held.
func (p *Proxy) closeLinks(match func(*link) bool) {
	for l := range p.links {
		if match(l) {
			l.close()
			delete(p.links, l)
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-p.done:
				return
			case <-time.After(10 * time.Millisecond): // a transient accept error (EMFILE): retry
			}
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// serve dials the upstream for client c and forwards both ways until either
// side closes.
func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	refused := p.cut || p.closed
	p.mu.Unlock()
	if refused {
		c.Close()
		return
	}
	s, err := net.DialTimeout("tcp", p.upstream, dialTimeout)
	if err != nil {
		c.Close()
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.cut || p.closed {
		p.mu.Unlock()
		l.close()
		return
	}
	l.holed.Store(p.hole)
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.upstreamCopy(l) }()
	go func() { defer wg.Done(); p.downstreamCopy(l) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// blackHoled reports whether data on l is to be dropped now, and marks l as
// having lived through the black hole.
func (p *Proxy) blackHoled(l *link) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hole {
		l.holed.Store(true)
	}
	return p.hole
}

// upstreamCopy forwards client → server, dropping data in a black hole.
func (p *Proxy) upstreamCopy(l *link) {
	defer l.close()
	buf := make([]byte, chunkSize)
	for {
		n, err := l.client.Read(buf)
		if n > 0 && !p.blackHoled(l) {
			if _, werr := l.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// chunk is data read from the upstream and the time it arrived.
type chunk struct {
	data []byte
	at   time.Time
}

// downstreamCopy forwards server → client, each chunk delayed by the
// latency from the time it arrived (chunks read meanwhile wait in line, so
// the delay adds to each round trip without serialising throughput), and
// dropping data in a black hole.
func (p *Proxy) downstreamCopy(l *link) {
	chunks := make(chan chunk, 64)
	stop := make(chan struct{})
	var reader sync.WaitGroup
	defer reader.Wait() // last: the reader ends once l is closed
	defer l.close()
	defer close(stop)
	reader.Add(1)
	go func() {
		defer reader.Done()
		defer close(chunks)
		for {
			buf := make([]byte, chunkSize)
			n, err := l.server.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: buf[:n], at: time.Now()}:
				case <-stop:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var timer *time.Timer
	for c := range chunks {
		if wait := time.Until(c.at.Add(time.Duration(p.latency.Load()))); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-p.done:
				return
			}
		}
		if p.blackHoled(l) {
			continue
		}
		if _, err := l.client.Write(c.data); err != nil {
			return
		}
	}
}

// Rewrite returns the PostgreSQL URL u with its host and port replaced by the
// proxy's address, so a client built from it goes through the proxy.
func (p *Proxy) Rewrite(u string) (string, error) {
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil {
		return "", err
	}
	i := strings.Index(u, "://")
	if i < 0 {
		return "", fmt.Errorf("netfault: %q is not a URL", u)
	}
	rest := u[i+3:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority := rest[:end]
	userinfo := ""
	if at := strings.LastIndex(authority, "@"); at >= 0 {
		userinfo = authority[:at+1]
	}
	return u[:i+3] + userinfo + net.JoinHostPort(host, port) + rest[end:], nil
}
