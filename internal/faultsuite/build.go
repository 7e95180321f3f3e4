package faultsuite

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Binaries are the programs the scenarios run, built once per test binary
// into a temporary directory.
type Binaries struct {
	// Inboxd is cmd/inboxd built with -race.
	Inboxd string
	// Embedder is ./embedder (the daemon through app.Main with the
	// tx.effect and http.effect Go handlers) built with -race.
	Embedder string
	// InboxdNoRace is cmd/inboxd built without -race, for measurements that
	// the race detector would distort (peak memory: its shadow memory and
	// per-goroutine state multiply the resident set).
	InboxdNoRace string

	dir string
}

// ModuleRoot returns the directory holding go.mod of the module that the
// current directory belongs to.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// Build compiles the binaries from the module at root. Close removes them.
func Build(root string) (*Binaries, error) {
	dir, err := os.MkdirTemp("", "inboxd-faultsuite-bin-")
	if err != nil {
		return nil, err
	}
	b := &Binaries{
		Inboxd:       filepath.Join(dir, "inboxd"),
		Embedder:     filepath.Join(dir, "embedder"),
		InboxdNoRace: filepath.Join(dir, "inboxd-norace"),
		dir:          dir,
	}
	builds := []struct {
		out, pkg string
		race     bool
	}{
		{b.Inboxd, "./cmd/inboxd", true},
		{b.Embedder, "./internal/faultsuite/embedder", true},
		{b.InboxdNoRace, "./cmd/inboxd", false},
	}
	for _, bl := range builds {
		args := []string{"build"}
		if bl.race {
			args = append(args, "-race")
		}
		args = append(args, "-o", bl.out, bl.pkg)
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			b.Close()
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	return b, nil
}

// Close removes the built binaries.
func (b *Binaries) Close() {
	if b != nil && b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
