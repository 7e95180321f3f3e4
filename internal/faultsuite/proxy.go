package faultsuite

import (
	"net/url"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/netfault"
)

// Proxy is an in-process TCP proxy (internal/netfault) between the daemons
// and PostgreSQL, listening on 127.0.0.1. Faults are applied to every
// connection, present and future, until Restore. Its methods fail the test
// on error.
type Proxy struct {
	t     testing.TB
	proxy *netfault.Proxy
}

// NewProxy starts a proxy to upstream (host:port). It is stopped when t
// ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := netfault.New(upstream)
	if err != nil {
		t.Fatalf("proxy: start: %v", err)
	}
	t.Cleanup(p.Close)
	return &Proxy{t: t, proxy: p}
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.proxy.Addr() }

// URL returns dbURL with its host and port replaced by the proxy's.
func (p *Proxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		p.t.Fatalf("proxy: bad URL: %v", err)
	}
	u.Host = p.Addr()
	return u.String()
}

// AddLatency delays every chunk from PostgreSQL to the clients by d, so
// every round trip takes d longer (requests themselves are not delayed).
func (p *Proxy) AddLatency(d time.Duration) {
	p.t.Helper()
	if err := p.proxy.Latency(d); err != nil {
		p.t.Fatalf("proxy: latency: %v", err)
	}
}

// CutAll closes every open connection at once (both sides see the
// connection drop) and keeps accepting new ones, like a failover or a
// restarted load balancer.
func (p *Proxy) CutAll() { p.proxy.CutConnections() }

// BlackHole stops forwarding in both directions without closing anything:
// connections stay open and new ones are accepted, but no byte passes,
// like a network partition that drops packets silently. Data sent meanwhile
// is lost; Restore closes the connections that lived through it.
func (p *Proxy) BlackHole() {
	p.t.Helper()
	if err := p.proxy.BlackHole(); err != nil {
		p.t.Fatalf("proxy: black hole: %v", err)
	}
}

// Restore removes every fault (latency, black hole). Connections that lived
// through a black hole are closed; new ones work normally.
func (p *Proxy) Restore() {
	p.t.Helper()
	if err := p.proxy.Restore(); err != nil {
		p.t.Fatalf("proxy: restore: %v", err)
	}
}

// Cut closes every open connection and refuses new ones (accepted and
// closed at once) until Restore, like a stopped server or a firewall
// reset: the clients stay cut off.
func (p *Proxy) Cut() { p.proxy.Cut() }
