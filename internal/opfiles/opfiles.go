// Package opfiles holds the rules every file an operator hands the daemon
// follows (the routes file, INBOXD_ROUTES; the webhook sources file,
// INBOXD_WEBHOOK_SOURCES; the secret files they name): one size-capped
// reader, one style of error and one bounded report of many errors. The
// routes file's parser is its subpackage routesfile.
//
// Every error names the file first, then the line where there is one:
//
//	routes.yaml: line 3: unknown field "tyep" (want routes, default)
//
// and a report of many errors shows MaxReported of them, one per line,
// then how many more there are, so a broken file cannot make a log line of
// hundreds of megabytes.
//
// The package imports nothing of inboxd's, so that every package that
// reads an operator's file (handlers, the sources, config) can use it.
package opfiles

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Read reads the file at path, refusing one larger than limit bytes: a
// regular file whose size says so is refused before it is read, and any
// other file (a pipe, or one that grows after the check) is read one byte
// past the limit at most; either error wraps ErrTooLarge. Errors opening
// or reading the file are returned as the os package gives them (they
// name the path).
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > limit {
		return nil, TooLarge(path, fi.Size(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: %w of %d bytes", path, ErrTooLarge, limit)
	}
	return data, nil
}

// ErrTooLarge is wrapped by the errors of a file over its size limit.
var ErrTooLarge = errors.New("larger than the limit")

// TooLarge is the error for the file name of size bytes, over limit:
// "name: file of 2048 bytes is larger than the limit of 1024 bytes".
func TooLarge(name string, size, limit int64) error {
	return fmt.Errorf("%s: file of %d bytes is %w of %d bytes", name, size, ErrTooLarge, limit)
}

// Errorf is an error about the file name at line (from 1): "name: line N:
// message". A line of 0 or less names no line: "name: message".
func Errorf(name string, line int, format string, args ...any) error {
	if line <= 0 {
		return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s: line %d: %s", name, line, fmt.Sprintf(format, args...))
}

// YAMLError turns an error of gopkg.in/yaml.v3 about the file name into
// the package's style: one line per problem (a decoding error into a
// struct lists several), each "name: line N: message", without yaml's own
// "yaml: " prefix. The lines of one problem are joined with "; ".
func YAMLError(name string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		errs := make([]error, len(te.Errors))
		for i, e := range te.Errors {
			errs[i] = fmt.Errorf("%s: %s", name, oneLine(strings.TrimPrefix(e, "yaml: ")))
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("%s: %s", name, oneLine(strings.TrimPrefix(err.Error(), "yaml: ")))
}

// MaxReported is how many errors a report of a file's check shows (Join);
// the rest are counted on one more line.
const MaxReported = 20

// maxLineBytes bounds one reported error line (an error may quote a value
// of the file).
const maxLineBytes = 1000

// Join joins errs one per line, as errors.Join does, but shows the first
// MaxReported of them only (each cut to a thousand bytes), then one line
// "<name>: and K more errors". It returns nil when errs is empty. The
// errors shown stay reachable through errors.Is and errors.As.
func Join(name string, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	shown := make([]error, 0, min(len(errs), MaxReported)+1)
	for _, err := range errs[:min(len(errs), MaxReported)] {
		if msg := err.Error(); len(msg) > maxLineBytes {
			// Cut, keeping what the error wraps.
			err = cutError{err: err, msg: strings.ToValidUTF8(msg[:maxLineBytes], "") + "…"}
		}
		shown = append(shown, err)
	}
	if more := len(errs) - len(shown); more > 0 {
		shown = append(shown, fmt.Errorf("%s: and %d more errors", name, more))
	}
	return errors.Join(shown...)
}

// cutError is an error whose message was shortened for a report.
type cutError struct {
	err error
	msg string
}

func (e cutError) Error() string { return e.msg }
func (e cutError) Unwrap() error { return e.err }

// oneLine joins the lines of a multi-line message with "; ".
func oneLine(s string) string {
	parts := strings.Split(s, "\n")
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

// RouteLabel names the n-th route (from 1) of a routes file in errors:
// `route 2 (type "order.created")`, or `route 2` when it has no type.
func RouteLabel(n int, eventType string) string {
	if eventType == "" {
		return fmt.Sprintf("route %d", n)
	}
	return fmt.Sprintf("route %d (type %q)", n, eventType)
}

// Duration is how the operator's texts (help, errors) write d: its
// String() without the zero minutes and seconds it ends with: 168h, 5m, 1h30m, 90s stays 1m30s; 0 is "0".
func Duration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
