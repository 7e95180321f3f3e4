package faultsuite

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// Proxy is an in-process TCP proxy (toxiproxy used as a library) between
// the daemons and PostgreSQL, listening on 127.0.0.1. Faults are applied to
// every connection, present and future, until Restore.
type Proxy struct {
	t     testing.TB
	mu    sync.Mutex
	proxy *toxiproxy.Proxy
	addr  string
	n     int // toxics added, for unique names
}

// NewProxy starts a proxy to upstream (host:port). It is stopped when t
// ends.
func NewProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "pg", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("proxy: start: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Proxy{t: t, proxy: p, addr: p.Listen}
}

// Addr is the proxy's listen address (host:port).
func (p *Proxy) Addr() string { return p.addr }

// URL returns dbURL with its host and port replaced by the proxy's.
func (p *Proxy) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		p.t.Fatalf("proxy: bad URL: %v", err)
	}
	u.Host = p.addr
	return u.String()
}

func (p *Proxy) addToxic(typ, stream string, attrs string) {
	p.t.Helper()
	p.mu.Lock()
	p.n++
	name := fmt.Sprintf("%s_%s_%d", typ, stream, p.n)
	p.mu.Unlock()
	body := fmt.Sprintf(`{"name":%q,"type":%q,"stream":%q,"toxicity":1,"attributes":%s}`, name, typ, stream, attrs)
	if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
		p.t.Fatalf("proxy: add %s toxic: %v", typ, err)
	}
}

// AddLatency delays every chunk from PostgreSQL to the clients by d, so
// every round trip takes d longer (requests themselves are not delayed).
func (p *Proxy) AddLatency(d time.Duration) {
	p.t.Helper()
	p.addToxic("latency", "downstream", fmt.Sprintf(`{"latency":%d,"jitter":0}`, d.Milliseconds()))
}

// CutAll closes every open connection at once (both sides see the
// connection drop) and keeps accepting new ones, like a failover or a
// restarted load balancer. New connections are refused for the instant the
// listener takes to reopen.
func (p *Proxy) CutAll() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.proxy.Stop() // closes the listener and every connection
	// Reopen on the same port. It was just released; retry briefly.
	var err error
	for range 50 {
		if err = p.proxy.Start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("proxy: reopen after cut: %v", err)
}

// BlackHole stops forwarding in both directions without closing anything:
// connections stay open and new ones are accepted, but no byte passes,
// like a network partition that drops packets silently. Data sent meanwhile
// is lost; Restore closes the connections that lived through it.
func (p *Proxy) BlackHole() {
	p.t.Helper()
	p.addToxic("timeout", "upstream", `{"timeout":0}`)
	p.addToxic("timeout", "downstream", `{"timeout":0}`)
}

// Restore removes every toxic (latency, black hole). Connections that lived
// through a black hole are closed by it; new ones work normally.
func (p *Proxy) Restore() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p.proxy.Toxics.ResetToxics(ctx)
}
