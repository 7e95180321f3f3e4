package opfiles_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/internal/opfiles"
)

// Read refuses a regular file over the limit by its size, before reading
// it (a sparse 1 GiB file), reads one at the limit whole, and refuses a
// stream with no size (a FIFO) once it has read one byte past the limit.
func TestReadIsCapped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(huge, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	_, err := opfiles.Read(huge, 1024)
	if want := huge + ": file of 1073741824 bytes is larger than the limit of 1024 bytes"; err == nil || err.Error() != want ||
		!errors.Is(err, opfiles.ErrTooLarge) {
		t.Fatalf("Read of a 1 GiB file: %v, want %q wrapping ErrTooLarge", err, want)
	}

	at := filepath.Join(dir, "at")
	if err := os.WriteFile(at, []byte(strings.Repeat("x", 1024)), 0o600); err != nil {
		t.Fatal(err)
	}
	if data, err := opfiles.Read(at, 1024); err != nil || len(data) != 1024 {
		t.Fatalf("Read of a file at the limit: %d bytes, %v", len(data), err)
	}
	if _, err := opfiles.Read(at, 1023); !errors.Is(err, opfiles.ErrTooLarge) {
		t.Fatalf("Read of a file one byte over: %v, want ErrTooLarge", err)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	written := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			written <- err
			return
		}
		defer f.Close()
		// More than the limit; the reader stops after limit+1 bytes and
		// closes, so this write ends with EPIPE.
		_, err = f.Write([]byte(strings.Repeat("y", 1<<20)))
		written <- err
	}()
	_, err = opfiles.Read(fifo, 1024)
	if want := fifo + ": larger than the limit of 1024 bytes"; err == nil || err.Error() != want || !errors.Is(err, opfiles.ErrTooLarge) {
		t.Fatalf("Read of a FIFO over the limit: %v, want %q", err, want)
	}
	if err := <-written; err == nil {
		t.Fatal("the writer wrote 1 MiB into a reader that stops at 1 KiB")
	}

	_, err = opfiles.Read(filepath.Join(dir, "missing"), 1024)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("Read of a missing file: %v, want a not-exist error naming it", err)
	}
}

// YAMLError puts yaml.v3's errors in the one style: the file, the line,
// the message, one line per problem, no "yaml: " prefix.
func TestYAMLError(t *testing.T) {
	t.Parallel()
	var v struct {
		A int `yaml:"a"`
		B int `yaml:"b"`
	}
	err := opfiles.YAMLError("f.yml", yaml.Unmarshal([]byte("a: x\nb: y\n"), &v))
	want := "f.yml: line 1: cannot unmarshal !!str `x` into int\nf.yml: line 2: cannot unmarshal !!str `y` into int"
	if err == nil || err.Error() != want {
		t.Errorf("type errors: %v\nwant: %s", err, want)
	}
	err = opfiles.YAMLError("f.yml", yaml.Unmarshal([]byte("a: [\n"), &v))
	if err == nil || !strings.HasPrefix(err.Error(), "f.yml: line ") || strings.Contains(err.Error(), "yaml:") ||
		strings.Contains(err.Error(), "\n") {
		t.Errorf("syntax error: %v, want one line \"f.yml: line N: ...\"", err)
	}
	if got := opfiles.Errorf("f.yml", 3, "x: %s", "bad").Error(); got != "f.yml: line 3: x: bad" {
		t.Errorf("Errorf with a line = %q", got)
	}
	if got := opfiles.Errorf("f.yml", 0, "x: %s", "bad").Error(); got != "f.yml: x: bad" {
		t.Errorf("Errorf without a line = %q", got)
	}
}

// Join shows MaxReported errors, each cut to a thousand bytes but still
// reachable by errors.Is, then counts the rest.
func TestJoinIsBounded(t *testing.T) {
	t.Parallel()
	if opfiles.Join("f", nil) != nil {
		t.Error("Join of no errors is not nil")
	}
	sentinel := errors.New("sentinel")
	errs := []error{fmt.Errorf("f: %s: %w", strings.Repeat("é", 2000), sentinel)}
	for i := range 99 {
		errs = append(errs, fmt.Errorf("f: error %d", i))
	}
	err := opfiles.Join("f", errs)
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != opfiles.MaxReported+1 || lines[len(lines)-1] != fmt.Sprintf("f: and %d more errors", 100-opfiles.MaxReported) {
		t.Fatalf("Join of 100 errors: %d lines, last %q", len(lines), lines[len(lines)-1])
	}
	if len(lines[0]) > 1000+len("…") || !strings.HasSuffix(lines[0], "…") {
		t.Errorf("first line of %d bytes, want it cut to 1000", len(lines[0]))
	}
	if !errors.Is(err, sentinel) {
		t.Error("the cut error no longer wraps its cause")
	}
}
