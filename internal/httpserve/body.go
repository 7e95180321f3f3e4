package httpserve

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// closeUnread makes every answer to a request whose body the handler did
// not read to its end close the connection, at once. net/http would
// otherwise read up to 256 KiB of the rest (and wait for it, up to the
// read timeout) before sending the answer, to keep the connection, and
// read it again when it closes the body after the answer: a refused body
// would be read after all, and a client that never sends it would hold
// the connection, and its place under the cap, in the server's hands.
func closeUnread(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		b := &eofBody{ReadCloser: r.Body}
		r.Body = b
		h.ServeHTTP(&closeWriter{ResponseWriter: w, body: b}, r)
		if !b.eof.Load() {
			// Once the answer is out, net/http closes the body, and
			// closing reads up to 256 KiB of what is left, waiting for it:
			// that read fails at once instead, and the connection closes.
			_ = http.NewResponseController(w).SetReadDeadline(time.Unix(1, 0))
		}
	})
}

// eofBody records whether its reader reached the end.
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		b.eof.Store(true)
	}
	return n, err
}

// closeWriter adds "Connection: close" to the answer when the body was
// not read to its end by the time the answer starts.
type closeWriter struct {
	http.ResponseWriter
	body  *eofBody
	wrote bool
}

func (w *closeWriter) WriteHeader(code int) {
	if !w.wrote && code >= 200 {
		w.wrote = true
		if !w.body.eof.Load() {
			w.Header().Set("Connection", "close")
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *closeWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush flushes the answer, when the underlying writer can.
func (w *closeWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *closeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Pace is how fast a request body must arrive: it may fall behind Rate
// by at most Grace (a body of n bytes read so far must have come within
// Grace + n/Rate of its start), it may pause at most Stall between two
// reads, and it must end within Max of its start. A zero field sets no
// bound of its kind.
type Pace struct {
	// Grace is how far behind Rate a body may fall (its first bytes
	// included).
	Grace time.Duration
	// Rate is the minimum average, in bytes per second.
	Rate int
	// Stall is the longest wait for the next bytes.
	Stall time.Duration
	// Max bounds the whole body.
	Max time.Duration
}

// The default pace of a body that arrives before its request is
// authenticated (a webhook's, the console's sign-in form): a body may fall
// 2 s behind 64 KiB/s and pause 5 s at most. A sender on a server's link
// keeps it easily; a client that trickles a byte a second is cut after
// about 2 s, one that sends a body all but its last bytes and holds it
// back, 5 s after its last bytes.
const (
	// DefaultGrace is the default Pace.Grace.
	DefaultGrace = 2 * time.Second
	// DefaultMinRate is the default Pace.Rate, in bytes per second.
	DefaultMinRate = 64 << 10
	// DefaultStall is the default Pace.Stall.
	DefaultStall = 5 * time.Second
)

// The errors of a body cut by its pace; each is a timeout
// (os.ErrDeadlineExceeded).
var (
	// ErrTooSlow: the body fell behind the minimum rate.
	ErrTooSlow = paceError("the body arrived slower than the minimum rate")
	// ErrStalled: no bytes came for Pace.Stall.
	ErrStalled = paceError("the body stalled")
	// ErrTooLong: the body took longer than Pace.Max.
	ErrTooLong = paceError("the body took too long")
)

type paceError string

func (e paceError) Error() string        { return "httpserve: " + string(e) }
func (e paceError) Is(target error) bool { return target == os.ErrDeadlineExceeded }

// PacedBody returns r's body held to p: before each read it sets the
// connection's read deadline to when the next bytes are due, and a read
// past it fails with ErrTooSlow, ErrStalled or ErrTooLong. Once the body
// has ended (or failed), reads return the same error and set no deadline:
// net/http lifts the deadline at the end of a body to wait for the
// client's next bytes, and a deadline set after that would cut the wait
// and cancel the request's context. The body's clock starts now.
func PacedBody(w http.ResponseWriter, r *http.Request, p Pace) io.ReadCloser {
	return &pacedBody{body: r.Body, rc: http.NewResponseController(w), p: p, start: time.Now()}
}

type pacedBody struct {
	body  io.ReadCloser
	rc    *http.ResponseController
	p     Pace
	start time.Time
	n     int64
	// unpaced is set when the server cannot set read deadlines.
	unpaced bool
	// err is the error that ended the body (io.EOF at its end).
	err error
}

func (b *pacedBody) Read(buf []byte) (int, error) {
	if b.err != nil {
		// Never arm a deadline again once the body has ended: net/http
		// then waits for the client's next bytes on the connection, and a
		// deadline would cut that wait and cancel the request's context.
		return 0, b.err
	}
	due, why := b.due(time.Now())
	if !b.unpaced && !due.IsZero() {
		if err := b.rc.SetReadDeadline(due); errors.Is(err, http.ErrNotSupported) {
			b.unpaced = true // a server of a caller's (an embedder's mux): its own timeouts hold
		} else if err != nil {
			return 0, err
		}
	}
	n, err := b.body.Read(buf)
	b.n += int64(n)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) && why != nil {
			err = why
		}
		b.err = err
	}
	return n, err
}

func (b *pacedBody) Close() error { return b.body.Close() }

// due returns when the next bytes are due, and the error of missing it
// (zero and nil: no bound).
func (b *pacedBody) due(now time.Time) (time.Time, error) {
	var due time.Time
	var why error
	earlier := func(t time.Time, err error) {
		if due.IsZero() || t.Before(due) {
			due, why = t, err
		}
	}
	if b.p.Rate > 0 {
		lag := time.Duration(float64(b.n+1) / float64(b.p.Rate) * float64(time.Second))
		earlier(b.start.Add(b.p.Grace+lag), ErrTooSlow)
	}
	if b.p.Stall > 0 {
		earlier(now.Add(b.p.Stall), ErrStalled)
	}
	if b.p.Max > 0 {
		earlier(b.start.Add(b.p.Max), ErrTooLong)
	}
	return due, why
}
