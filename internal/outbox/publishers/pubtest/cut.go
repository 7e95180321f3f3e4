package pubtest

import (
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/netfault"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/testkit"
)

// ConnectionCut is the connection-cut test of a publisher p that reaches
// its broker through proxy: a message published before the cut; with the
// connection cut, p is not ready and a Publish fails within its deadline,
// transient, not refused; once the network heals a Publish succeeds
// again; read back (consume, n messages) the broker holds "before" then
// "after".
func ConnectionCut(t *testing.T, proxy *netfault.Proxy, p outbox.Publisher, dest outbox.Destination, consume func(t *testing.T, n int) []Received) {
	t.Helper()
	if _, err := PublishOne(p, Message(dest, "before", "t", "k", []byte("{}")), 10*time.Second); err != nil {
		t.Fatalf("before the cut: %v", err)
	}
	proxy.Cut()
	testkit.WaitFor(t, 10*time.Second, "not ready once cut", func() bool { return !p.Ready() })
	const deadline = 3 * time.Second
	took, err := PublishOne(p, Message(dest, "during", "t", "k", []byte("{}")), deadline)
	WantTransient(t, "publishing while cut off", err, took, deadline)

	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		_, err := PublishOne(p, Message(dest, "after", "t", "k", []byte("{}")), deadline)
		return err == nil, "a Publish succeeds after the network heals (last: " + ErrString(err) + ")"
	})
	got := consume(t, 2)
	if got[0].Headers[outbox.EventIDHeader] != "before" || got[1].Headers[outbox.EventIDHeader] != "after" {
		t.Errorf("read back %v then %v", got[0].Headers[outbox.EventIDHeader], got[1].Headers[outbox.EventIDHeader])
	}
}
