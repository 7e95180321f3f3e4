// Package netfault puts an in-process TCP proxy (toxiproxy, used as a
// library) between a client and a server so tests can degrade the network
// between them: add latency, cut every connection, or black-hole traffic.
//
// It is test infrastructure: the worker, ingest and fault-suite tests put it
// between the daemon and PostgreSQL. It imports nothing from inboxd, so any
// package's tests may use it.
package netfault

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

var proxySeq atomic.Int64

// Proxy forwards TCP connections from Addr to an upstream address.
type Proxy struct {
	proxy *toxiproxy.Proxy
	addr  string
}

// New starts a proxy on a free loopback port that forwards to upstream
// (host:port). Close it when done.
func New(upstream string) (*Proxy, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, fmt.Sprintf("netfault-%d", proxySeq.Add(1)), "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("netfault: start proxy: %w", err)
	}
	return &Proxy{proxy: p, addr: p.Listen}, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.addr }

// Latency delays the data flowing from the upstream to clients by d (so each
// round trip takes d longer), on open connections and new ones, until
// Restore.
func (p *Proxy) Latency(d time.Duration) error {
	return p.add(fmt.Sprintf(`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds()))
}

// BlackHole stops all data in both directions without closing anything, as
// a silent network partition does, until Restore.
func (p *Proxy) BlackHole() error {
	if err := p.add(`{"name":"blackhole_down","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`); err != nil {
		return err
	}
	return p.add(`{"name":"blackhole_up","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`)
}

// Cut closes every open connection and refuses new ones until Restore, as a
// stopped server or a firewall reset does.
func (p *Proxy) Cut() { p.proxy.Stop() }

// Restore removes every toxic and, after Cut, listens again on the same
// address.
func (p *Proxy) Restore() error {
	p.proxy.Toxics.ResetToxics(context.Background())
	if !p.proxy.Enabled {
		if err := p.proxy.Start(); err != nil {
			return fmt.Errorf("netfault: restart proxy: %w", err)
		}
	}
	return nil
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() { p.proxy.Stop() }

func (p *Proxy) add(spec string) error {
	if _, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		return fmt.Errorf("netfault: add toxic: %w", err)
	}
	return nil
}

// Rewrite returns the PostgreSQL URL u with its host and port replaced by the
// proxy's address, so a client built from it goes through the proxy.
func (p *Proxy) Rewrite(u string) (string, error) {
	host, port, err := net.SplitHostPort(p.addr)
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
