package webhook

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inboxd/inboxd/internal/testkit"
)

// rawConn opens a connection to the listener of b and writes head (and
// body); it is closed when t ends.
func rawConn(t *testing.T, b *whBundle, head string, body []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := testkit.RawConn(t, b.src.Addr(), head)
	if len(body) > 0 {
		if _, err := c.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	return c, bufio.NewReader(c)
}

// forgedHead is the head of an unsigned standard-webhooks request to the
// source std declaring length bytes of body.
func forgedHead(length int) string {
	return fmt.Sprintf("POST %sstd HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
		"webhook-id: msg_forged\r\nwebhook-timestamp: %d\r\nwebhook-signature: v1,Zm9yZ2Vk\r\nContent-Length: %d\r\n\r\n",
		PathPrefix, time.Now().Unix(), length)
}

// readAnswer reads the answer on c within d.
func readAnswer(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", d, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// The reported case (issue 25, item 7): bodies were read whole before the
// signature check, 1,024 of them at once of max_body each (a gigabyte).
// The bodies in hand share a byte budget: with three bodies of nearly
// max_body held, a fourth request declaring max_body is answered 503 with
// Retry-After before a byte of its body is sent, its connection closed;
// the memory held never exceeds the budget; once the held bodies go, a
// signed request is stored.
func TestWebhookBodyBudgetRefusesBeforeReading(t *testing.T) {
	t.Parallel()
	const maxBody = 64 << 10
	b := setupWebhook(t, nil, func(c *Config) {
		for i := range c.Sources {
			c.Sources[i].MaxBody = maxBody
		}
		// Three bodies one byte short of max_body hold a first chunk and a
		// chunk each; what is left then is one byte short of what a fourth
		// one needs.
		c.BodyBudget = 3*(webhookFirstChunk+webhookChunk) + bodyNeed(maxBody) - 1
		c.BodyStall = 30 * time.Second
	})
	held := func() float64 { return testutil.ToFloat64(b.src.wm.bodyBytes) }
	var holders []net.Conn
	for range 3 {
		c, _ := rawConn(t, b, forgedHead(maxBody), bytes.Repeat([]byte{'x'}, maxBody-1))
		holders = append(holders, c)
	}
	testkit.WaitFor(t, 10*time.Second, "three bodies held", func() bool { return held() >= 3*(maxBody-1) })

	c, r := rawConn(t, b, forgedHead(maxBody), nil)
	start := time.Now()
	resp, body := readAnswer(t, c, r, 2*time.Second)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("a body over the budget: %s (Retry-After %q, close %v) %s; want 503 with Retry-After, closing",
			resp.Status, resp.Header.Get("Retry-After"), resp.Close, body)
	}
	t.Logf("refused in %s with %.0f bytes held (budget %d)", time.Since(start).Round(time.Millisecond), held(), b.src.cfg.BodyBudget)
	if got := testutil.ToFloat64(b.src.wm.bodyRefusals.WithLabelValues("budget")); got != 1 {
		t.Errorf("body refusals for the budget = %v, want 1", got)
	}
	if h := held(); h > float64(b.src.cfg.BodyBudget) {
		t.Errorf("%.0f bytes held, over the budget of %d", h, b.src.cfg.BodyBudget)
	}
	for _, h := range holders {
		_ = h.Close()
	}
	testkit.WaitFor(t, 10*time.Second, "the held bodies released", func() bool { return held() == 0 })
	payload := []byte(`{"type":"t"}`)
	if resp, out := b.post(t, "std", stdRequest(t, "after-budget", payload, time.Now()), payload); resp.StatusCode != http.StatusOK {
		t.Fatalf("a signed request after the flood: %d %s", resp.StatusCode, out)
	}
	if n := b.count(t, "event_id <> 'after-budget'"); n != 0 {
		t.Errorf("%d rows of unsigned requests", n)
	}
}

// The reported case (issue 25, item 8): connections trickling a byte of
// body every 2 s held the request cap, and a correctly signed request was
// answered 503 "too many requests at once" for 20 s and more. The cap is
// taken only by a request whose body is read and verified, and a body that
// falls behind the minimum rate is cut with a 408: with more tricklers
// than the cap, a signed request is stored, and each trickler is cut soon
// after its grace.
func TestWebhookSlowBodiesAreCutAndDoNotHoldTheCap(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	b := setupWebhook(t, nil, func(c *Config) {
		c.MaxRequests = 2
		c.MinBodyRate = 1024
		c.BodyGrace = grace
	})
	type cut struct {
		code int
		took time.Duration
	}
	cuts := make(chan cut, 4)
	for range 4 {
		c, r := rawConn(t, b, forgedHead(100), nil)
		start := time.Now()
		go func() {
			for range 50 {
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				cuts <- cut{took: time.Since(start)}
				return
			}
			resp.Body.Close()
			cuts <- cut{code: resp.StatusCode, took: time.Since(start)}
		}()
	}
	payload := []byte(`{"type":"t"}`)
	resp, out := b.post(t, "std", stdRequest(t, "signed-1", payload, time.Now()), payload)
	if resp.StatusCode != http.StatusOK || !strings.Contains(out, "stored") {
		t.Fatalf("a signed request while 4 connections trickle (cap 2): %d %s", resp.StatusCode, out)
	}
	for range 4 {
		c := <-cuts
		if c.code != http.StatusRequestTimeout || c.took > grace+3*time.Second {
			t.Errorf("a trickling connection: answered %d after %s, want 408 soon after the %s grace", c.code, c.took.Round(time.Millisecond), grace)
		} else {
			t.Logf("a trickling connection cut after %s", c.took.Round(time.Millisecond))
		}
	}
	if got := testutil.ToFloat64(b.src.wm.bodyRefusals.WithLabelValues("too_slow")); got != 4 {
		t.Errorf("body refusals too_slow = %v, want 4", got)
	}
}
