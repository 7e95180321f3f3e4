package faultsuite

import (
	"os"
	"path/filepath"

	"github.com/inboxd/inboxd/internal/testkit"
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

// Build compiles the binaries: cmd/inboxd from the main module (the
// repository root, github.com/inboxd/inboxd as this module's go.mod
// replaces it) and ./embedder from this module, the fault suite's own
// (internal/faultsuite). Close removes them.
func Build() (*Binaries, error) {
	root, err := testkit.ModuleDir("github.com/inboxd/inboxd")
	if err != nil {
		return nil, err
	}
	suite, err := testkit.CurrentModuleDir()
	if err != nil {
		return nil, err
	}
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
		dir, out, pkg string
		race          bool
	}{
		{root, b.Inboxd, "./cmd/inboxd", true},
		{suite, b.Embedder, "./embedder", true},
		{root, b.InboxdNoRace, "./cmd/inboxd", false},
	}
	for _, bl := range builds {
		if err := testkit.Build(bl.dir, bl.out, bl.pkg, bl.race); err != nil {
			b.Close()
			return nil, err
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
