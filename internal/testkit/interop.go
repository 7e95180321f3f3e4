package testkit

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/syncbuf"
)

// Interop is the set of third-party clients (kafkajs, amqplib, nats.js,
// standardwebhooks, svix) that interop tests run against inboxd: Node.js and
// the packages that `npm ci` installs under internal/interop from its
// package-lock.json (.ci/run does it).
type Interop struct {
	// Node is the path of the node binary.
	Node string
	// Dir is internal/interop, where the scripts and node_modules live.
	Dir string
}

// NodeInterop locates Node.js and internal/interop's node_modules, or ends
// t with Unavailable (a failure under CI=true) when either is missing.
func NodeInterop(t testing.TB) Interop {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		Unavailable(t, "node is not on PATH (Debian's nodejs package)")
	}
	root, err := ModuleDir("github.com/inboxd/inboxd")
	if err != nil {
		t.Fatalf("interop: %v", err)
	}
	dir := filepath.Join(root, "internal", "interop")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		Unavailable(t, "internal/interop/node_modules is missing: run npm ci --prefix internal/interop")
	}
	return Interop{Node: node, Dir: dir}
}

// Run runs one script of internal/interop with args and the extra
// environment env (KEY=value), and returns what it wrote to stdout. It
// fails t, with the script's stderr, when the script exits non-zero or
// outlives timeout.
func (i Interop) Run(t testing.TB, timeout time.Duration, script string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, i.Node, append([]string{filepath.Join(i.Dir, script)}, args...)...)
	cmd.Dir = i.Dir
	cmd.Env = append(os.Environ(), env...)
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node %s: %v\nstderr:\n%s\nstdout:\n%s", script, err, Tail(stderr.String(), logTail), Tail(string(out), logTail))
	}
	return string(out)
}
