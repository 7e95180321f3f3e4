package testkit

import (
	"net/url"
	"testing"

	"github.com/inboxd/inboxd/internal/netfault"
)

// ProxyTo starts a TCP proxy (internal/netfault) to the server of rawURL,
// closed when the test ends, and returns it with rawURL pointing at it
// instead: a client built from that URL goes through the proxy's faults.
func ProxyTo(t testing.TB, rawURL string) (*netfault.Proxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := netfault.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	u.Host = proxy.Addr()
	return proxy, u.String()
}
