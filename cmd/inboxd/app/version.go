package app

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// The build's identity, set by the Makefile and goreleaser with -ldflags
// (the version from the repository's VERSION file, the one place it is
// written):
//
//	-X github.com/inboxd/inboxd/cmd/inboxd/app.Version=0.4.0
//	-X github.com/inboxd/inboxd/cmd/inboxd/app.Commit=<git commit>[-dirty]
//	-X github.com/inboxd/inboxd/cmd/inboxd/app.Date=<the commit's time, RFC 3339>
//
// Left empty (go build, go install …@v0.4.0), they are taken from the
// module's build information: its version, and the VCS revision and time
// when the build recorded them.
var (
	// Version is the semantic version, without a leading v.
	Version string
	// Commit is the git commit the binary was built from.
	Commit string
	// Date is when the binary's source was committed, so that two builds
	// of one commit are identical.
	Date string
)

// build is what `inboxd version` prints.
type build struct {
	version, commit, date string
	modified              bool
}

// currentBuild is this binary's build: the -ldflags values, else the
// module's build information.
func currentBuild() build {
	info, _ := debug.ReadBuildInfo()
	return buildOf(info, Version, Commit, Date)
}

// buildOf reads a build from info (nil when the binary has none) under the
// values set by -ldflags, which win. A module version (v0.4.0, as go
// install …@v0.4.0 records it) loses its v; a build with neither is
// "devel".
func buildOf(info *debug.BuildInfo, version, commit, date string) build {
	b := build{version: version, date: date}
	b.commit, b.modified = strings.CutSuffix(commit, "-dirty")
	if info == nil {
		info = &debug.BuildInfo{}
	}
	if b.version == "" {
		if v := info.Main.Version; v != "" && v != "(devel)" {
			b.version = strings.TrimPrefix(v, "v")
		} else {
			b.version = "devel"
		}
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			if b.commit == "" {
				b.commit = s.Value
			}
		case "vcs.time":
			if b.date == "" {
				b.date = s.Value
			}
		case "vcs.modified":
			if commit == "" {
				b.modified = s.Value == "true"
			}
		}
	}
	return b
}

// String is the line `inboxd version` prints after "inboxd ":
//
//	0.4.0 (commit 1a2b3c4d5e6f, 2026-12-03T10:00:00Z, go1.26.8 linux/amd64)
func (b build) String() string {
	parts := make([]string, 0, 3)
	if b.commit != "" {
		c := b.commit
		if len(c) > 12 {
			c = c[:12]
		}
		if b.modified {
			c += "-dirty"
		}
		parts = append(parts, "commit "+c)
	}
	if b.date != "" {
		parts = append(parts, b.date)
	}
	parts = append(parts, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH)
	return b.version + " (" + strings.Join(parts, ", ") + ")"
}

// versionString is the semantic version alone, as the start-up line, the
// inboxd_build_info metric and the traces carry it.
func versionString() string { return currentBuild().version }
