package app

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// The version comes from the build: -ldflags (make build, goreleaser) win;
// a go install …@v0.4.0 build has only the module's version; a plain go
// build is "devel", with the VCS revision when the build recorded it.
func TestBuildOf(t *testing.T) {
	t.Parallel()
	platform := runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-12-01T09:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name                  string
		info                  *debug.BuildInfo
		version, commit, date string
		want                  string
	}{
		{"ldflags", vcs, "0.4.0", "fedcba9876543210fedc", "2026-12-03T10:00:00Z",
			"0.4.0 (commit fedcba987654, 2026-12-03T10:00:00Z, " + platform + ")"},
		{"go install @v0.4.0", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "", "", "",
			"0.4.0 (" + platform + ")"},
		{"go build in a checkout", vcs, "", "", "",
			"devel (commit 0123456789ab-dirty, 2026-12-01T09:00:00Z, " + platform + ")"},
		{"no build information", nil, "", "", "", "devel (" + platform + ")"},
	} {
		if got := buildOf(c.info, c.version, c.commit, c.date).String(); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// make build's -ldflags reach `inboxd version` (the flags are the
// Makefile's: read from it, not copied here).
func TestVersionOfMakeBuild(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("make", "-s", "-C", "../../..", "--no-print-directory", "print-ldflags",
		"VERSION=9.8.7", "COMMIT=fedcba9876543210", "DATE=2026-12-03T10:00:00Z").Output()
	if err != nil {
		t.Fatalf("make print-ldflags: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "inboxd")
	build := exec.Command("go", "build", "-ldflags", strings.TrimSpace(string(out)), "-o", bin, "../")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	got, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "inboxd 9.8.7 (commit fedcba987654, 2026-12-03T10:00:00Z, " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")\n"
	if string(got) != want {
		t.Errorf("version printed %q, want %q", got, want)
	}
}

// inboxd migrate on a database that does not exist (SQLSTATE 3D000) says
// to create it first: migrate creates the tables, not the database.
func TestMigrateOnAMissingDatabaseSaysCreateIt(t *testing.T) {
	t.Parallel()
	url := pgtest.WithDatabase(pgtest.AdminURL(), "inboxd_no_such_db_migrate")
	code, _, stderr := runMain(t, []string{"INBOXD_DATABASE_URL=" + url}, "migrate")
	if code != ExitFailure || !strings.Contains(stderr, "3D000") || !strings.Contains(stderr, "create the database first (createdb NAME") {
		t.Errorf("migrate on a missing database: exit %d, stderr:\n%s", code, stderr)
	}
}
