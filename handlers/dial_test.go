package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// emfileDial is the error of a dial when the process has no file descriptor
// left, as net.Dialer returns it.
func emfileDial() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}
}

func TestIsDialError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"EMFILE, wrapped twice", fmt.Errorf("http POST x: %w", &url.Error{Op: "Post", URL: "http://x", Err: emfileDial()}), true},
		{"bare EMFILE", fmt.Errorf("open: %w", syscall.EMFILE), true},
		{"ENFILE", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.ENFILE)}, true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"DNS not found", &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "orders.internal", IsNotFound: true}}, true},
		{"DNS, bare", &net.DNSError{Err: "server misbehaving", Name: "orders.internal", IsTemporary: true}, true},
		{"proxy", &net.OpError{Op: "proxyconnect", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"reset while reading", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, false},
		{"deadline", context.DeadlineExceeded, false},
		{"other", errors.New("http 503 Service Unavailable"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		if got := handlers.IsDialError(tt.err); got != tt.want {
			t.Errorf("%s: IsDialError(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// The reported case: with the process's file descriptors used up, dials to
// an http route failed with "socket: too many open files". That says nothing
// about the event: the handler's error must be retryable, and say that the
// request was not sent.
func TestHTTPDialFailureIsRetryable(t *testing.T) {
	t.Parallel()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, emfileDial() },
	}}
	h, err := handlers.NewHTTP(handlers.HTTPConfig{URL: "http://orders.internal/hook", Timeout: 5 * time.Second, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	err = h.Handle(context.Background(), testEvent())
	switch {
	case err == nil || handlers.IsPermanent(err):
		t.Fatalf("Handle: %v, want a retryable error", err)
	case !handlers.IsNotSent(err):
		t.Fatalf("Handle: %v, want it marked NotSent (the attempt is not counted)", err)
	case !handlers.IsDialError(err) || !errors.Is(err, syscall.EMFILE):
		t.Fatalf("Handle: %v, want a dial error wrapping EMFILE", err)
	case !strings.Contains(err.Error(), "too many open files") || !strings.Contains(err.Error(), "not sent"):
		t.Fatalf("error %q should say the request was not sent, and why", err)
	}
}
