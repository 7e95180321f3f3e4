package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fakeBinary builds a static program that answers `version` as inboxd
// does, for version: the image's build and checks without compiling the
// daemon (make image-check does that with the real binary).
func fakeBinary(t *testing.T, version string) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() {\n\tif len(os.Args) > 1 && os.Args[1] == \"version\" {\n\t\tfmt.Println(\"inboxd " + version + " (fake)\")\n\t}\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fake\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "inboxd")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func testSpec(t *testing.T) Spec {
	return Spec{Version: "9.8.7", Commit: "fedcba98", Date: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC),
		Binaries:       map[string]string{runtime.GOOS + "/" + runtime.GOARCH: fakeBinary(t, "9.8.7")},
		CACertificates: "/etc/ssl/certs/ca-certificates.crt"}
}

// writeIndex writes idx as a layout in a new directory.
func writeIndex(t *testing.T, idx v1.ImageIndex) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	if err := Write(idx, "9.8.7", dir, ""); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The image builds the same twice, and passes its own checks: the nonroot
// user, the entrypoint, the labels, no shell, `inboxd version` run from its
// unpacked filesystem.
func TestImageBuildsReproduciblyAndPassesItsChecks(t *testing.T) {
	spec := testSpec(t)
	if _, err := os.Stat(spec.CACertificates); err != nil {
		t.Fatalf("the build machine's CA certificates: %v (Debian's ca-certificates package)", err)
	}
	a, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Fatalf("two builds of the same inputs differ: %s and %s", da, db)
	}
	dir := writeIndex(t, a)
	r, err := Check(dir, spec.Version)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if !strings.HasPrefix(r.Ran, "inboxd 9.8.7 (") || r.Digest != da {
		t.Errorf("report %+v", r)
	}
	if _, err := Check(dir, "9.8.8"); err == nil || !strings.Contains(err.Error(), `label org.opencontainers.image.version = "9.8.7", want "9.8.8"`) {
		t.Errorf("an image of another version passed: %v", err)
	}
}

// The checks fail an image with a shell, or one that runs as root.
func TestImageCheckCatches(t *testing.T) {
	spec := testSpec(t)
	idx, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	img, _, err := hostImage(idx)
	if err != nil {
		t.Fatal(err)
	}
	reindex := func(img v1.Image) v1.ImageIndex {
		cf, _ := img.ConfigFile()
		return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: cf.OS, Architecture: cf.Architecture}}})
	}
	shell, err := layer(spec.Date, []file{{name: "bin/", mode: 0o755, dir: true}, {name: "bin/sh", mode: 0o755, data: []byte("#!")}})
	if err != nil {
		t.Fatal(err)
	}
	withShell, err := mutate.AppendLayers(img, shell)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cfg := cf.Config
	cfg.User = "0"
	asRoot, err := mutate.Config(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		img  v1.Image
		want string
	}{
		{"a shell", withShell, "bin/sh is a shell"},
		{"root", asRoot, `user "0", want 65532:65532`},
	} {
		dir := writeIndex(t, reindex(c.img))
		if _, err := Check(dir, spec.Version); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: check said %v, want an error with %q", c.name, err, c.want)
		}
	}
	if _, err := layout.ImageIndexFromPath(t.TempDir()); err == nil {
		t.Error("an empty directory read as a layout")
	}
}
