package faultsuite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RequestHead is the head of an HTTP/1.1 request as an attacker writes it
// by hand: the request line, Host, the headers given (in order, "Name:
// value"), and a Content-Length when length >= 0, ending with the blank
// line unless open (then the head never ends: a slow-headers attack).
func RequestHead(method, path string, length int, open bool, headers ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: inboxd\r\n", method, path)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	if length >= 0 {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", length)
	}
	if !open {
		b.WriteString("\r\n")
	}
	return b.Bytes()
}

// ConnAttack holds N connections open against Addr, each writing Head,
// then Body at once, then (with TrickleEvery) one more byte every
// TrickleEvery, and otherwise nothing: what it sent stays unfinished. A
// connection lives until the server answers or closes it; with Reconnect
// it is then opened again after Pause (default 50 ms), so that the attack
// holds connections rather than burning the CPU on reconnections.
type ConnAttack struct {
	// Addr is host:port.
	Addr string
	// N is the number of connections held at once.
	N int
	// Head is the request's head (RequestHead), Body what follows at once.
	Head, Body []byte
	// TrickleEvery, when set, sends one more byte of body every so often.
	TrickleEvery time.Duration
	// Reconnect opens a connection again once the server closed it, after
	// Pause.
	Reconnect bool
	Pause     time.Duration

	wg     sync.WaitGroup
	cancel context.CancelFunc

	open     atomic.Int64 // connections open now
	sent     atomic.Int64 // connections that wrote Head and Body in full
	written  atomic.Int64 // connections whose write of Body returned (in full or not)
	mu       sync.Mutex
	lives    []time.Duration // from the end of Head to the server's close, per connection
	answers  map[string]int  // the server's answers by status code ("none": closed without one)
	retryOK  int             // 503 answers carrying Retry-After
	answered []time.Duration // from the end of Head to the answer's status line
}

// Start opens the connections in the background and returns at once.
func (a *ConnAttack) Start(ctx context.Context) {
	ctx, a.cancel = context.WithCancel(ctx)
	a.answers = map[string]int{}
	if a.Pause <= 0 {
		a.Pause = 50 * time.Millisecond
	}
	for range a.N {
		a.wg.Go(func() {
			for ctx.Err() == nil {
				a.once(ctx)
				if !a.Reconnect {
					<-ctx.Done()
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(a.Pause):
				}
			}
		})
	}
}

// Stop closes every connection and waits for them.
func (a *ConnAttack) Stop() {
	a.cancel()
	a.wg.Wait()
}

// once runs one connection until the server answers or closes it, or ctx
// ends.
func (a *ConnAttack) once(ctx context.Context) {
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", a.Addr)
	if err != nil {
		return
	}
	a.open.Add(1)
	defer a.open.Add(-1)
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	if _, err := c.Write(a.Head); err != nil {
		return
	}
	start := time.Now()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		code, retry := "none", false
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			code, retry = strconv.Itoa(resp.StatusCode), resp.Header.Get("Retry-After") != ""
			a.mu.Lock()
			a.answered = append(a.answered, time.Since(start))
			a.mu.Unlock()
			_, _ = io.Copy(io.Discard, resp.Body)
		}
		// The server answered (and may keep the connection) or closed it:
		// either way this connection's part is over.
		_ = c.Close()
		if ctx.Err() != nil {
			return
		}
		a.mu.Lock()
		a.lives = append(a.lives, time.Since(start))
		a.answers[code]++
		if code == "503" && retry {
			a.retryOK++
		}
		a.mu.Unlock()
	}()
	if len(a.Body) > 0 {
		if _, err := c.Write(a.Body); err == nil {
			a.sent.Add(1)
		}
		a.written.Add(1)
	}
	var tick <-chan time.Time
	if a.TrickleEvery > 0 {
		t := time.NewTicker(a.TrickleEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ended:
			return
		case <-ctx.Done():
			_ = c.Close()
			<-ended
			return
		case <-tick:
			if _, err := c.Write([]byte{'x'}); err != nil {
				_ = c.Close()
				<-ended
				return
			}
		}
	}
}

// Open is the number of the attack's connections open now.
func (a *ConnAttack) Open() int { return int(a.open.Load()) }

// Sent is the number of connections that wrote their head and body in
// full.
func (a *ConnAttack) Sent() int { return int(a.sent.Load()) }

// Written is the number of connections whose write of the body returned:
// written in full, or cut short by the server.
func (a *ConnAttack) Written() int { return int(a.written.Load()) }

// Ended is the number of connections the server answered or closed.
func (a *ConnAttack) Ended() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.lives)
}

// Lives returns how long each connection ended by the server lived after
// its head, sorted.
func (a *ConnAttack) Lives() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]time.Duration(nil), a.lives...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Answered returns, sorted, how long after its head each answered
// connection got its answer.
func (a *ConnAttack) Answered() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := append([]time.Duration(nil), a.answered...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Answers returns the server's answers by status code ("none": closed
// without an answer) and how many 503s carried Retry-After.
func (a *ConnAttack) Answers() (map[string]int, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.answers))
	for k, v := range a.answers {
		out[k] = v
	}
	return out, a.retryOK
}

// Describe summarises the attack for failure messages and summary lines.
func (a *ConnAttack) Describe() string {
	answers, retry := a.Answers()
	var parts []string
	for k, v := range answers {
		parts = append(parts, fmt.Sprintf("%s×%d", k, v))
	}
	sort.Strings(parts)
	lives := a.Lives()
	return fmt.Sprintf("open=%d sent=%d ended=%d answers=[%s] 503_with_retry_after=%d life_p50=%s life_max=%s",
		a.Open(), a.Sent(), len(lives), strings.Join(parts, " "), retry, quantile(lives, 0.5), quantile(lives, 1))
}

// quantile returns the q-quantile of sorted ds (0 for none), rounded.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := min(len(ds)-1, int(q*float64(len(ds)-1)+0.5))
	return ds[i].Round(time.Millisecond)
}

// timedGet GETs url on a connection of its own (as a kubelet probe does)
// and returns the status code and how long the answer took; timeout bounds
// the wait.
func timedGet(url string, timeout time.Duration) (int, time.Duration, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	return timedDo(req, timeout)
}

// signedPost POSTs body to url signed with secret as event id, on a
// connection of its own, and returns the status code and how long the
// answer took.
func signedPost(url string, secret WebhookSecret, id string, body []byte, timeout time.Duration) (int, time.Duration, error) {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", secret.Sign(id, ts, body))
	return timedDo(req, timeout)
}

// timedDo sends req on a connection of its own and returns the status
// code and how long the whole answer took.
func timedDo(req *http.Request, timeout time.Duration) (int, time.Duration, error) {
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, time.Since(start), err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}
