package handlers

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the row goes dead at once, with err's
// message as its last_error, without using the remaining attempts.
// Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was made with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// notSentError marks an error that says the event never reached its
// target.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }

// NotSent marks err as saying that the handler could not hand the event to
// its target at all (no connection could be opened: the target or its
// network is down, a DNS error, no file descriptor left): the attempt is
// not counted, and the row is retried after its route's backoff (the delay
// of its current attempt number, which does not grow), however long the
// target stays unreachable, instead of going dead once its attempts are
// used up. Such rows stay received: the stale-row alerts see them.
// NotSent(nil) returns nil. A permanent error is never also not sent.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err: err}
}

// IsNotSent reports whether err, or an error it wraps, was made with
// NotSent.
func IsNotSent(err error) bool {
	var n *notSentError
	return errors.As(err, &n)
}

// retryAfterError asks for the next attempt no sooner than after a delay.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter returns a retryable error that asks for the next attempt after
// delay instead of the backoff schedule's own (the worker still caps it at
// INBOXD_BACKOFF_MAX). A nil err is replaced by a generic one.
func RetryAfter(delay time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryAfterError{err: err, delay: delay}
}

// RetryDelay returns the delay requested with RetryAfter, if any.
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.delay, true
	}
	return 0, false
}

// IsDialError reports whether err says that a connection to the target could
// not be opened, so that the request was never sent: a failed dial or proxy
// connect (connection refused, host or network unreachable, a DNS error),
// or the process or system out of file descriptors (EMFILE, ENFILE) or of
// local ports (EADDRNOTAVAIL) wherever it happened. Such a failure says
// nothing about the event, and a later attempt may succeed: the http handler
// returns it as a retryable error, never a permanent one.
func IsDialError(err error) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect") {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	for _, errno := range [...]syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
