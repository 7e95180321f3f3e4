package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// shells are the names of programs that would give a shell in the image:
// none may be in it, anywhere.
var shells = []string{"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox"}

// Report is what Check found.
type Report struct {
	// Digest is the index's.
	Digest v1.Hash
	// Platforms are the images' platforms, each with its compressed size
	// (manifest, config and layers: what a pull transfers) and the size of
	// its files.
	Platforms []PlatformReport
	// Ran is the output of `inboxd version` run from the unpacked image of
	// the build machine's platform, and how (chroot as the image's user).
	Ran, RanHow string
	// Checked lists what was checked, one line each.
	Checked []string
}

// PlatformReport is one image of the index.
type PlatformReport struct {
	Platform             string
	Compressed, Unpacked int64
}

// Check checks the image layout in dir against version: every image's
// config (the nonroot user, the entrypoint, the labels with the version,
// the port), its filesystem (no shell anywhere, the binary, the CA
// certificates, the users), and runs `inboxd version` from the unpacked
// filesystem of the build machine's platform.
func Check(dir, version string) (Report, error) {
	var r Report
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return r, err
	}
	if r.Digest, err = idx.Digest(); err != nil {
		return r, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return r, err
	}
	if len(im.Manifests) == 0 {
		return r, errors.New("the index holds no image")
	}
	var errs []error
	for _, desc := range im.Manifests {
		img, err := idx.Image(desc.Digest)
		if err != nil {
			return r, err
		}
		pr, err := checkImage(img, desc, version)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", pr.Platform, err))
		}
		r.Platforms = append(r.Platforms, pr)
	}
	r.Checked = []string{
		"config: user " + fmt.Sprintf("%d:%d", UID, GID) + " (not root), entrypoint " + Binary + ", cmd run, port " + HTTPPort + ", platform as indexed",
		"labels: org.opencontainers.image.{title,description,source,licenses,version,revision,created} and " + imageLabel + ", version " + version,
		"filesystem: no shell (" + strings.Join(shells, ", ") + ") anywhere, nothing in /bin or /sbin, every file root's but the nonroot user's home",
		"filesystem: " + Binary + " 0755, " + CACertificates + " parses as PEM certificates, /etc/passwd's nonroot user " + fmt.Sprint(UID) + " without a login shell",
	}
	img, desc, err := hostImage(idx)
	if err == nil {
		r.Ran, r.RanHow, err = runVersion(img, version)
		if err == nil {
			r.Checked = append(r.Checked, "ran: "+r.RanHow+" on "+desc.Platform.String()+": "+r.Ran)
		}
	}
	if err != nil {
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// checkImage checks one image of the index.
func checkImage(img v1.Image, desc v1.Descriptor, version string) (PlatformReport, error) {
	pr := PlatformReport{Platform: "?"}
	if desc.Platform != nil {
		pr.Platform = desc.Platform.String()
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return pr, err
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	c := cf.Config
	if c.User != fmt.Sprintf("%d:%d", UID, GID) {
		bad("user %q, want %d:%d (not root, numeric so that runAsNonRoot can be verified)", c.User, UID, GID)
	}
	if !slices.Equal(c.Entrypoint, []string{Binary}) || !slices.Equal(c.Cmd, []string{"run"}) {
		bad("entrypoint %q cmd %q, want [%s] [run]", c.Entrypoint, c.Cmd, Binary)
	}
	if _, ok := c.ExposedPorts[HTTPPort]; !ok {
		bad("does not expose %s", HTTPPort)
	}
	if desc.Platform == nil || cf.OS != desc.Platform.OS || cf.Architecture != desc.Platform.Architecture {
		bad("config is %s/%s, the index says %v", cf.OS, cf.Architecture, desc.Platform)
	}
	want := Spec{Version: version}.Labels()
	for k := range want {
		got, ok := c.Labels[k]
		switch {
		case !ok || got == "":
			bad("label %s is missing", k)
		case k == "org.opencontainers.image.version" || k == imageLabel || k == "org.opencontainers.image.title":
			if got != want[k] {
				bad("label %s = %q, want %q", k, got, want[k])
			}
		}
	}
	if m, err := img.Manifest(); err == nil {
		pr.Compressed = m.Config.Size
		for _, l := range m.Layers {
			pr.Compressed += l.Size
		}
		if raw, err := img.RawManifest(); err == nil {
			pr.Compressed += int64(len(raw))
		}
	}
	files, unpacked, err := listFiles(img)
	if err != nil {
		return pr, err
	}
	pr.Unpacked = unpacked
	for p, h := range files {
		base := path.Base(p)
		if slices.Contains(shells, base) {
			bad("%s is a shell", p)
		}
		if strings.HasPrefix(p, "bin/") || strings.HasPrefix(p, "sbin/") || strings.HasPrefix(p, "usr/bin/") {
			bad("%s: the image has no /bin, /sbin or /usr/bin", p)
		}
		if (h.Uid != 0 || h.Gid != 0) && p != "home/nonroot" {
			bad("%s is owned by %d:%d, want root", p, h.Uid, h.Gid)
		}
	}
	if h, ok := files[strings.TrimPrefix(Binary, "/")]; !ok || h.Mode&0o777 != 0o755 || h.Typeflag != tar.TypeReg {
		bad("%s is missing or not a 0755 file", Binary)
	}
	contents, err := fileContents(img, strings.TrimPrefix(CACertificates, "/"), "etc/passwd")
	if err != nil {
		return pr, err
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(contents[0]) {
		bad("%s holds no PEM certificate", CACertificates)
	}
	if !bytes.Contains(contents[1], []byte(fmt.Sprintf(":%d:%d:", UID, GID))) || bytes.Contains(contents[1], []byte("/bin/sh")) {
		bad("/etc/passwd lacks the nonroot user %d, or names a shell", UID)
	}
	return pr, errors.Join(errs...)
}

// listFiles returns every entry of img's filesystem (its layers applied)
// by path without the leading slash, and the files' total size.
func listFiles(img v1.Image) (map[string]*tar.Header, int64, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	files := map[string]*tar.Header{}
	var size int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, size, nil
		}
		if err != nil {
			return nil, 0, err
		}
		files[strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), "/")] = h
		size += h.Size
	}
}

// fileContents returns the contents of the files named, in their order.
func fileContents(img v1.Image, names ...string) ([][]byte, error) {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	out := make([][]byte, len(names))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if i := slices.Index(names, strings.TrimPrefix(path.Clean("/"+h.Name), "/")); i >= 0 {
			if out[i], err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
	for i, n := range names {
		if out[i] == nil {
			return nil, fmt.Errorf("/%s is not in the image", n)
		}
	}
	return out, nil
}

// hostImage is the index's image for the build machine's platform, else
// its first.
func hostImage(idx v1.ImageIndex) (v1.Image, v1.Descriptor, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if len(im.Manifests) == 0 {
		return nil, v1.Descriptor{}, errors.New("the index holds no image")
	}
	desc := im.Manifests[0]
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == runtime.GOOS && d.Platform.Architecture == runtime.GOARCH {
			desc = d
		}
	}
	img, err := idx.Image(desc.Digest)
	return img, desc, err
}

// runVersion unpacks img into a temporary directory and runs `inboxd
// version` from it: chrooted into it as the image's user when this process
// may (root), so that nothing of the build machine is used; else the
// unpacked binary as it is.
func runVersion(img v1.Image, version string) (out, how string, err error) {
	dir, err := os.MkdirTemp("", "inboxd-image-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir)
	// The image's root is world-readable, as a container's is.
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", "", err
	}
	if err := unpack(img, dir); err != nil {
		return "", "", err
	}
	cmd := exec.Command(filepath.Join(dir, Binary), "version")
	how = "the unpacked " + Binary + " (not root: no chroot)"
	if os.Geteuid() == 0 {
		cmd = exec.Command(Binary, "version")
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Credential: &syscall.Credential{Uid: UID, Gid: GID}}
		how = "chroot into the unpacked filesystem as " + fmt.Sprintf("%d:%d", UID, GID)
	}
	cmd.Env = []string{"PATH=/usr/local/bin"}
	b, err := cmd.CombinedOutput()
	out = strings.TrimSpace(string(b))
	if err != nil {
		return out, how, fmt.Errorf("inboxd version in the image: %w: %s", err, out)
	}
	if !strings.HasPrefix(out, "inboxd "+version+" (") {
		return out, how, fmt.Errorf("inboxd version in the image printed %q, want inboxd %s (…)", out, version)
	}
	return out, how, nil
}

// unpack writes img's filesystem into dir: directories, regular files and
// symbolic links, modes kept; owners are not changed (the checks read them
// from the layers).
func unpack(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode&0o777)|os.ModeDir); err != nil {
				return err
			}
			if err := os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777))
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		}
	}
}

// modeBits are the sticky, setuid and setgid bits of a tar mode.
func modeBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

func runCheck(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	version := fs.String("version", "", "the version the image must carry (VERSION)")
	same := fs.String("same", "", "another build of the same inputs: its index must have the same digest")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *version == "" {
		return errors.New("usage: check -version V [-same DIR] DIR")
	}
	r, err := Check(fs.Arg(0), *version)
	fmt.Fprintf(w, "image %s:%s, index %s\n", Repository, *version, r.Digest)
	for _, p := range r.Platforms {
		fmt.Fprintf(w, "  %-12s %6.2f MiB compressed, %6.2f MiB unpacked\n", p.Platform, float64(p.Compressed)/(1<<20), float64(p.Unpacked)/(1<<20))
	}
	for _, c := range r.Checked {
		fmt.Fprintf(w, "  checked %s\n", c)
	}
	if err != nil {
		return err
	}
	if *same != "" {
		other, err := layout.ImageIndexFromPath(*same)
		if err != nil {
			return err
		}
		d, err := other.Digest()
		if err != nil {
			return err
		}
		if d != r.Digest {
			return fmt.Errorf("not reproducible: %s has index %s, %s has %s", fs.Arg(0), r.Digest, *same, d)
		}
		fmt.Fprintf(w, "  checked reproducible: %s is the same index\n", *same)
	}
	return nil
}
