package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/opfiles"
	"github.com/inboxd/inboxd/internal/opfiles/routesfile"
)

// The registry is built by the same code at start and on every SIGHUP: a
// routes file over routesfile.MaxBytes is refused by its size, and
// a file of thousands of bad routes gives an error of
// opfiles.MaxReported lines and a count, not a line per route (a
// 50 MB file once made a 207 MB log line on SIGHUP).
func TestRoutesFileIsBoundedAtStartAndOnReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, []byte(strings.Repeat("# padding\n", routesfile.MaxBytes/10+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	b := registryBuilder{cfg: config.Config{Routes: huge}, log: zerolog.Nop()}
	if _, err := b.build(context.Background()); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Errorf("build with a routes file over the limit: %v", err)
	}

	var sb strings.Builder
	sb.WriteString("routes:\n")
	for i := range 3000 {
		fmt.Fprintf(&sb, "  - {type: t%d, handler: teleport}\n", i)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	b.cfg.Routes = bad
	_, err := b.build(context.Background())
	if err == nil {
		t.Fatal("build with 3,000 bad routes: no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != opfiles.MaxReported+1 || !strings.HasSuffix(lines[len(lines)-1], fmt.Sprintf("and %d more errors", 3000-opfiles.MaxReported)) {
		t.Errorf("build: error of %d lines (%d bytes), last %q", len(lines), len(err.Error()), lines[len(lines)-1])
	}
}
