package httpserve

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
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
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
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

// At the cap, a new connection closes the one that has waited longest
// without a request in a handler (here: idle after its request) and is
// served at once.
func TestCapMakesRoomForANewConnection(t *testing.T) {
	t.Parallel()
	l := testLimits()
	l.MaxConns = 2
	addr := serve(t, okHandler, l)
	first, r1 := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	answer(t, first, r1, 5*time.Second)                          // then idle
	second, r2 := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n") // headers never end
	third, r3 := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := answer(t, third, r3, 5*time.Second); resp.StatusCode != http.StatusOK {
		t.Fatalf("third connection: %s", resp.Status)
	}
	if !closed(first, r1, 5*time.Second) {
		t.Error("the oldest waiting connection was not closed to make room")
	}
	if closed(second, r2, 200*time.Millisecond) {
		t.Error("the younger waiting connection was closed too")
	}
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
// and its connection closed: the server neither reads nor waits for the
// body (which never comes here).
func TestUnreadBodyClosesTheConnection(t *testing.T) {
	t.Parallel()
	addr := serve(t, okHandler, testLimits())
	c, r := dial(t, addr, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
	resp := answer(t, c, r, 2*time.Second)
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("answer %s, close %v; want 200 closing the connection", resp.Status, resp.Close)
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
