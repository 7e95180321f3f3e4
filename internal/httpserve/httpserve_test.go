package httpserve

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testLimits are short limits for tests.
func testLimits() Limits {
	return Limits{ReadHeader: 5 * time.Second, Read: 10 * time.Second, Write: 10 * time.Second, Idle: 10 * time.Second}
}

// serve serves h with l on a local port until t ends and returns the
// address.
func serve(t *testing.T, h http.Handler, l Limits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := New(h, l, zerolog.Nop())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// okHandler answers "ok" to everything.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })

// dial opens a connection to addr, writes head, and returns it with its
// reader; it is closed when t ends.
func dial(t *testing.T, addr, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := testkit.RawConn(t, addr, head)
	return c, bufio.NewReader(c)
}

// answer reads a response from r within d.
func answer(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("no answer within %s: %v", d, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// closed reports whether the server closed c within d (EOF or reset).
func closed(c net.Conn, r *bufio.Reader, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := r.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// The reported case (an earlier issue): idle keep-alive connections were
// kept for ever, and enough of them used up the process's file
// descriptors. The server closes a connection left idle for its idle
// timeout.
func TestClosesIdleConnections(t *testing.T) {
	t.Parallel()
	l := testLimits()
	l.Idle = 200 * time.Millisecond
	addr := serve(t, okHandler, l)
	c, r := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := answer(t, c, r, 5*time.Second); resp.Close {
		t.Fatal("the first answer closed the connection")
	}
	if !closed(c, r, 5*time.Second) {
		t.Fatalf("idle connection not closed within 5 s (idle timeout %s)", l.Idle)
	}
}

// At the cap, a new connection closes the one waiting longest on its
// client; a connection accepted but not read yet keeps its place; when
// none waits (one is being served, one not read yet), a new one waits
// until one does.
func TestCapMakesRoomForANewConnection(t *testing.T) {
	t.Parallel()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newCapListener(tcp, 2, zerolog.Nop())
	t.Cleanup(func() { _ = l.Close() })
	type peer struct {
		client net.Conn
		server *trackedConn
		read   chan error // the server side's Read, once it returns
		ended  atomic.Bool
	}
	connect := func() *peer {
		c, err := net.Dial("tcp", tcp.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		accepted := make(chan net.Conn, 1)
		go func() {
			a, err := l.Accept()
			if err == nil {
				accepted <- a
			}
		}()
		select {
		case a := <-accepted:
			t.Cleanup(func() { _ = a.Close() })
			return &peer{client: c, server: a.(*trackedConn), read: make(chan error, 1)}
		case <-time.After(5 * time.Second):
			t.Fatal("not accepted within 5 s")
			return nil
		}
	}
	// wait makes the server side wait on its client (a Read that blocks).
	wait := func(p *peer) {
		go func() {
			_, err := p.server.Read(make([]byte, 1))
			p.ended.Store(true)
			p.read <- err
		}()
		testkit.WaitFor(t, 5*time.Second, "the server side reading", func() bool {
			return p.server.reading.Load() != 0 || p.ended.Load()
		})
	}
	evicted := func(p *peer) bool {
		select {
		case err := <-p.read:
			return err != nil
		case <-time.After(5 * time.Second):
			return false
		}
	}
	a := connect()
	wait(a)
	b := connect()
	wait(b)
	c := connect() // the cap: a, waiting longest, makes room
	if !evicted(a) {
		t.Fatal("the connection waiting longest was not closed to make room")
	}
	d := connect() // b waits, c was not read yet: b makes room
	if !evicted(b) {
		t.Fatal("a waiting connection was not closed to make room for one while another was not read yet")
	}
	connState(c.server, http.StateActive) // c is being served, d not read yet: a new one waits
	accepted := make(chan net.Conn, 1)
	go func() {
		if x, err := l.Accept(); err == nil {
			accepted <- x
		}
	}()
	e, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	select {
	case <-accepted:
		t.Fatal("a connection was let in while none waited on its client")
	case <-time.After(300 * time.Millisecond):
	}
	connState(c.server, http.StateIdle)
	wait(c) // served, then idle, waiting for its next request: it makes room
	select {
	case x := <-accepted:
		_ = x.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting connection was not let in once another waited on its client")
	}
	if !evicted(c) {
		t.Error("the idle connection was not the one closed")
	}
	_ = d
}

// A connection inside a handler is never closed to make room: a new one
// waits for a place, and is served when the handler ends.
func TestCapWaitsWhileEveryConnectionIsInAHandler(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	l := testLimits()
	l.MaxConns = 1
	addr := serve(t, h, l)
	busy, rb := dial(t, addr, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	<-entered
	next, rn := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = next.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := rn.Peek(1); err == nil {
		t.Fatal("a second connection was served while the first was in its handler and held the only place")
	}
	close(release)
	if resp := answer(t, busy, rb, 5*time.Second); resp.StatusCode != http.StatusOK {
		t.Fatalf("the busy request: %s", resp.Status)
	}
	_ = busy.Close()
	if resp := answer(t, next, rn, 5*time.Second); resp.StatusCode != http.StatusOK {
		t.Fatalf("the waiting connection: %s", resp.Status)
	}
}

// A request whose body the handler does not read is answered at once
// and its connection closed at once: the server neither reads nor waits
// for the body (which never comes here), before the answer or after.
func TestUnreadBodyClosesTheConnection(t *testing.T) {
	t.Parallel()
	addr := serve(t, okHandler, testLimits())
	c, r := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	resp := answer(t, c, r, 2*time.Second)
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("answer %s, close %v; want 200 closing the connection", resp.Status, resp.Close)
	}
	if !closed(c, r, time.Second) {
		t.Fatal("the connection stayed open after the answer, the server waiting for the body it did not read")
	}
	// A body read to its end keeps the connection.
	read := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok\n")
	})
	addr = serve(t, read, testLimits())
	c, r = dial(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	if resp := answer(t, c, r, 2*time.Second); resp.Close {
		t.Error("a request whose body was read closed its connection")
	}
}

// pacedServer serves a handler that reads its body under p and answers
// 200 with the bytes read, or 408 with the error.
func pacedServer(t *testing.T, p Pace, after func(r *http.Request) string) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := PacedBody(w, r, p)
		b, err := io.ReadAll(body)
		if err == nil {
			_, err = body.Read(make([]byte, 1)) // once more, as a form or JSON reader may
			if errors.Is(err, io.EOF) {
				err = nil
			}
		}
		if err != nil {
			w.WriteHeader(http.StatusRequestTimeout)
			_, _ = io.WriteString(w, err.Error())
			return
		}
		extra := ""
		if after != nil {
			extra = after(r)
		}
		_, _ = io.WriteString(w, string(b)+extra)
	})
	return serve(t, h, testLimits())
}

// A body that falls behind the pace is cut: one that trickles a byte
// every 200 ms against a minimum of 1 KiB/s after 300 ms; one that stops
// after its first bytes, after the stall limit.
func TestPacedBodyCutsSlowBodies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		p     Pace
		write func(c net.Conn)
		want  error
	}{
		{"trickle", Pace{Grace: 300 * time.Millisecond, Rate: 1024}, func(c net.Conn) {
			for range 20 {
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}, ErrTooSlow},
		{"stall", Pace{Stall: 300 * time.Millisecond}, func(c net.Conn) { _, _ = c.Write([]byte("xxxxx")) }, ErrStalled},
		{"long", Pace{Max: 300 * time.Millisecond}, func(c net.Conn) { _, _ = c.Write([]byte("xxxxx")) }, ErrTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := pacedServer(t, tc.p, nil)
			c, r := dial(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
			start := time.Now()
			go tc.write(c)
			resp, err := func() (*http.Response, error) {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				return http.ReadResponse(r, nil)
			}()
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), tc.want.Error()) {
				t.Fatalf("answer %s %q, want 408 %q", resp.Status, b, tc.want)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("cut after %s, want about 300 ms", took)
			}
		})
	}
}

// A body that keeps its pace is read whole, and once it has ended a
// further read sets no deadline: a handler that then waits past the stall
// limit still has its request (net/http's wait for the client's next
// bytes is not cut, which would cancel the request's context).
func TestPacedBodyArmsNoDeadlineAfterItsEnd(t *testing.T) {
	t.Parallel()
	p := Pace{Grace: 200 * time.Millisecond, Rate: 1024, Stall: 200 * time.Millisecond}
	addr := pacedServer(t, p, func(r *http.Request) string {
		select {
		case <-r.Context().Done():
			return " canceled"
		case <-time.After(600 * time.Millisecond):
			return " alive"
		}
	})
	c, r := dial(t, addr, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "hello alive" {
		t.Errorf("after the body, the handler saw %q, want %q", b, "hello alive")
	}
}

func TestLimitsValidate(t *testing.T) {
	t.Parallel()
	if err := testLimits().Validate(); err != nil {
		t.Fatal(err)
	}
	err := Limits{}.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 3 {
		t.Errorf("Limits{}.Validate() = %v, want four lines", err)
	}
}

// The connection closed to make room is, among those waiting on their
// client with no request being served, the one waiting longest of those
// that have sent something, and only then of those that have sent nothing
// yet; one the server has not read yet, or one whose request is being
// served (its answer is being written while the server's read for a client
// leaving is pending), never is.
func TestVictimIsTheConnectionWaitingLongestOnItsClient(t *testing.T) {
	t.Parallel()
	l := newCapListener(nil, 5, zerolog.Nop())
	fresh := &trackedConn{l: l} // accepted, not read yet
	served := &trackedConn{l: l}
	served.serving.Store(true)
	served.reading.Store(50)
	served.got.Store(100)
	silent := &trackedConn{l: l} // waiting for its first byte since 10
	silent.reading.Store(10)
	idle := &trackedConn{l: l} // answered, reading its next request since 200
	idle.reading.Store(200)
	idle.got.Store(100)
	slow := &trackedConn{l: l} // sending its headers since 100
	slow.reading.Store(100)
	slow.got.Store(20)
	for _, c := range []*trackedConn{fresh, served, silent, idle, slow} {
		l.conns[c] = struct{}{}
	}
	for _, want := range []*trackedConn{slow, idle, silent, nil} {
		v, _ := l.victimLocked()
		if v != want {
			t.Fatalf("victim %p, want %p (fresh %p, served %p, silent %p, idle %p, slow %p)", v, want, fresh, served, silent, idle, slow)
		}
		delete(l.conns, v)
	}
	connState(served, http.StateIdle)
	if v, _ := l.victimLocked(); v != served {
		t.Errorf("a connection gone idle after its answer is not the victim")
	}
}
