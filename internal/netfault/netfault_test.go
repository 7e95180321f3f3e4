package netfault

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a server that writes back every line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// roundTrip sends one line on c and reads it back within timeout.
func roundTrip(c net.Conn, r *bufio.Reader, timeout time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	_, err := r.ReadString('\n')
	return err
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestForwardsAndAddsLatency(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("round trip through the proxy: %v", err)
	}
	const d = 200 * time.Millisecond
	if err := p.Latency(d); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("round trip took %s with %s latency", took, d)
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatalf("after Restore: %v", err)
	}
}

func TestCutClosesAndRefusesUntilRestore(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("an open connection still works after Cut")
	}
	c2, r2 := dial(t, p)
	if err := roundTrip(c2, r2, 5*time.Second); err == nil {
		t.Fatal("a new connection works after Cut")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	c3, r3 := dial(t, p)
	if err := roundTrip(c3, r3, 5*time.Second); err != nil {
		t.Fatalf("a new connection after Restore: %v", err)
	}
}

func TestCutConnectionsKeepsAccepting(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.CutConnections()
	if err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("an open connection still works after CutConnections")
	}
	c2, r2 := dial(t, p)
	if err := roundTrip(c2, r2, 5*time.Second); err != nil {
		t.Fatalf("a new connection after CutConnections: %v", err)
	}
}

func TestBlackHoleDropsThenRestoreCloses(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if err := roundTrip(c, r, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.BlackHole(); err != nil {
		t.Fatal(err)
	}
	// A deadline is the only way to see a black hole: nothing comes back.
	if err := roundTrip(c, r, 300*time.Millisecond); err == nil {
		t.Fatal("data passed through a black hole")
	}
	if err := p.Restore(); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c, r, 5*time.Second); err == nil {
		t.Fatal("a connection that lived through the black hole still works after Restore")
	}
	c2, r2 := dial(t, p)
	if err := roundTrip(c2, r2, 5*time.Second); err != nil {
		t.Fatalf("a new connection after Restore: %v", err)
	}
}

func TestRewrite(t *testing.T) {
	p := newProxy(t)
	got, err := p.Rewrite("postgres://u:p@db.example:5432/x?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if want := "postgres://u:p@" + p.Addr() + "/x?sslmode=disable"; got != want {
		t.Fatalf("Rewrite = %q, want %q", got, want)
	}
}
