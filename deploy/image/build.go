// Command image builds inboxd's container image without a Docker engine,
// and checks it: `make image` and `make image-check` run it.
//
//	go run ./image build -version 0.4.0 -commit C -date 2026-12-03T10:00:00Z \
//	    -out ../bin/image/oci -tar ../bin/image/inboxd.tar linux/amd64=../bin/inboxd-linux-amd64 …
//	go run ./image check -version 0.4.0 [-same ../bin/image/again] ../bin/image/oci
//
// The image needs no base to download: two layers written here, one with
// /etc/passwd and /etc/group (root and nonroot, UID/GID 65532, no login
// shell), /etc/nsswitch.conf, the CA certificates of the build machine and
// the nonroot user's home; one with the static binary at
// /usr/local/bin/inboxd. No shell, no package manager. Every file's time,
// the image's creation time, is the commit's (-date), owners and modes are
// fixed: two builds of one binary are the same image, digest for digest.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed facts; the checks (check.go) and deploy's tests read
// these, not copies.
const (
	// Repository is where the image is published.
	Repository = "ghcr.io/inboxd/inboxd"
	// Binary is the daemon's path in the image.
	Binary = "/usr/local/bin/inboxd"
	// UID and GID are the nonroot user's (distroless's), which the
	// manifests' runAsUser names.
	UID, GID = 65532, 65532
	// HTTPPort is INBOXD_HTTP_ADDR's default port.
	HTTPPort = "8080/tcp"
	// CACertificates is where Go's crypto/x509 looks first on Linux.
	CACertificates = "/etc/ssl/certs/ca-certificates.crt"
	// imageLabel names the image's full reference, as the Dockerfile's does.
	imageLabel = "io.github.inboxd.image"
)

// Spec is what an image is built from.
type Spec struct {
	Version, Commit string
	// Date is the commit's time: every file's and the image's.
	Date time.Time
	// Binaries maps a platform ("linux/amd64") to its static binary.
	Binaries map[string]string
	// CACertificates is the PEM bundle copied into the image.
	CACertificates string
}

// Labels are the image's labels: the OCI annotations' keys and the
// reference label.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "inboxd",
		"org.opencontainers.image.description": "Inbox daemon: Kafka, RabbitMQ, NATS JetStream and signed webhooks into a deduplicated PostgreSQL inbox, processed by fenced workers; an outbox relay back out",
		"org.opencontainers.image.source":      "https://github.com/inboxd/inboxd",
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.revision":    s.Commit,
		"org.opencontainers.image.created":     s.Date.UTC().Format(time.RFC3339),
		imageLabel:                             Repository + ":" + s.Version,
	}
}

// Build returns the image index of spec: one image per platform.
func Build(spec Spec) (v1.ImageIndex, error) {
	if spec.Version == "" || spec.Date.IsZero() || len(spec.Binaries) == 0 {
		return nil, errors.New("a version, a date and at least one binary are needed")
	}
	certs, err := os.ReadFile(spec.CACertificates)
	if err != nil {
		return nil, fmt.Errorf("CA certificates: %w", err)
	}
	base, err := layer(spec.Date, []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID))},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID))},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte("hosts: files dns\n")},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: strings.TrimPrefix(CACertificates, "/"), mode: 0o644, data: certs},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, dir: true, uid: UID, gid: GID},
		{name: "tmp/", mode: 0o1777, dir: true},
	})
	if err != nil {
		return nil, err
	}
	platforms := make([]string, 0, len(spec.Binaries))
	for p := range spec.Binaries {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return nil, fmt.Errorf("platform %q: want os/arch", p)
		}
		bin, err := os.ReadFile(spec.Binaries[p])
		if err != nil {
			return nil, fmt.Errorf("binary: %w", err)
		}
		app, err := layer(spec.Date, []file{
			{name: "usr/", mode: 0o755, dir: true},
			{name: "usr/local/", mode: 0o755, dir: true},
			{name: "usr/local/bin/", mode: 0o755, dir: true},
			{name: strings.TrimPrefix(Binary, "/"), mode: 0o755, data: bin},
		})
		if err != nil {
			return nil, err
		}
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
		if img, err = mutate.AppendLayers(img, base, app); err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = goos, goarch
		cf.Created = v1.Time{Time: spec.Date.UTC()}
		cf.Author = "The inboxd Authors"
		cf.Config = v1.Config{
			User:         fmt.Sprintf("%d:%d", UID, GID),
			Entrypoint:   []string{Binary},
			Cmd:          []string{"run"},
			Env:          []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=" + CACertificates},
			WorkingDir:   "/home/nonroot",
			ExposedPorts: map[string]struct{}{HTTPPort: {}},
			Labels:       spec.Labels(),
		}
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform:    &v1.Platform{OS: goos, Architecture: goarch},
			Annotations: map[string]string{"org.opencontainers.image.ref.name": spec.Version},
		}})
	}
	return idx, nil
}

// file is one entry of a layer.
type file struct {
	name     string
	mode     int64
	dir      bool
	data     []byte
	uid, gid int
}

// layer is a gzipped tar of files, in their order, every entry at t.
func layer(t time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: t.UTC(), Format: tar.FormatPAX}
		if f.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// Write writes idx as an OCI image layout in dir (emptied first), and,
// when tarPath is set, the image of the build machine's platform (or the
// first) as a tarball that `docker load` reads, tagged
// ghcr.io/inboxd/inboxd:<version>.
func Write(idx v1.ImageIndex, version, dir, tarPath string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if _, err := layout.Write(dir, idx); err != nil {
		return fmt.Errorf("write the layout: %w", err)
	}
	if tarPath == "" {
		return nil
	}
	img, _, err := hostImage(idx)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(Repository + ":" + version)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(tarPath), 0o755); err != nil {
		return err
	}
	return tarball.WriteToFile(tarPath, tag, img)
}

func runBuild(args []string) error {
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	spec := Spec{Binaries: map[string]string{}}
	fs.StringVar(&spec.Version, "version", "", "the version (VERSION)")
	fs.StringVar(&spec.Commit, "commit", "", "the git commit")
	date := fs.String("date", "", "the commit's time, RFC 3339")
	fs.StringVar(&spec.CACertificates, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle of CA certificates to copy into the image")
	out := fs.String("out", "", "directory of the OCI image layout")
	tarPath := fs.String("tar", "", "also write the build machine's platform as a docker-load tarball here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d, err := time.Parse(time.RFC3339, *date)
	if err != nil {
		return fmt.Errorf("-date: %w", err)
	}
	spec.Date = d
	for _, a := range fs.Args() {
		p, path, ok := strings.Cut(a, "=")
		if !ok {
			return fmt.Errorf("%q: want os/arch=binary", a)
		}
		spec.Binaries[p] = path
	}
	if *out == "" {
		return errors.New("-out is required")
	}
	idx, err := Build(spec)
	if err != nil {
		return err
	}
	if err := Write(idx, spec.Version, *out, *tarPath); err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image: %s:%s, index %s, in %s\n", Repository, spec.Version, digest, *out)
	return nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: image build|check …")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = runBuild(os.Args[2:])
	case "check":
		err = runCheck(os.Args[2:], os.Stdout)
	default:
		err = fmt.Errorf("unknown command %q: build or check", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}
