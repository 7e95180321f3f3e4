package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inboxd/inboxd/internal/syncbuf"
)

// buildInboxd builds the inboxd binary (no -race) into dir and returns its
// path; the main module is found with `go list -m` (this program is a module
// of its own that replaces github.com/inboxd/inboxd by the repository root).
func buildInboxd(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/inboxd/inboxd").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/inboxd/inboxd: %w (run inboxd-bench inside its module, cmd/inboxd-bench, or pass -inboxd)", err)
	}
	root := strings.TrimSpace(string(out))
	if root == "" {
		return "", errors.New("github.com/inboxd/inboxd has no directory: run inboxd-bench inside its module, cmd/inboxd-bench, or pass -inboxd")
	}
	bin := filepath.Join(dir, "inboxd")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/inboxd")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/inboxd: %v\n%s", err, out)
	}
	return bin, nil
}

// benchMemory runs the inboxd binary as a subprocess on a topic filled with
// small events of 1 KiB payloads, then on one with big events of 1 MiB
// payloads (INBOXD_MAX_PAYLOAD's default, so stored), each until every event
// is processed, and reads the subprocess's peak RSS (VmHWM).
func benchMemory(ctx context.Context, env *environment, bin string, small, big int, logf func(string, ...any)) ([]MemoryRun, error) {
	dir, err := os.MkdirTemp("", "inboxd-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		if bin, err = buildInboxd(ctx, dir); err != nil {
			return nil, err
		}
	}
	var out []MemoryRun
	for _, c := range []struct {
		events, size int
		limit        int64
	}{{small, 1 << 10, 200_000_000}, {big, 1 << 20, 512_000_000}} {
		if c.events <= 0 {
			continue
		}
		m, err := memoryRun(ctx, env, bin, dir, c.events, c.size)
		if err != nil {
			return nil, fmt.Errorf("%d-byte payloads: %w", c.size, err)
		}
		m.TargetBytes = c.limit
		logf("  %s payloads: peak RSS %s (%d events, %.0f events/s)", sizeLabel(c.size), megabytes(m.PeakRSSBytes), m.Events, m.PerSecond)
		out = append(out, m)
	}
	return out, nil
}

func memoryRun(ctx context.Context, env *environment, bin, dir string, n, size int) (MemoryRun, error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return MemoryRun{}, err
	}
	defer done()

	maxMessage := 0
	if size >= 1<<20 {
		maxMessage = 4 << 20
	}
	k, err := newKafka(maxMessage, 5*time.Millisecond)
	if err != nil {
		return MemoryRun{}, err
	}
	defer k.close()
	// Incompressible payloads (PostgreSQL compresses big bytea values): one
	// random block shared by every record.
	payload := make([]byte, size)
	_, _ = rand.Read(payload)
	lastIDs, err := k.fill(ctx, "m-", n, func(int) []byte { return payload })
	if err != nil {
		return MemoryRun{}, err
	}
	routes, err := routesFile(dir)
	if err != nil {
		return MemoryRun{}, err
	}

	var stderr syncbuf.Buffer
	cmd := exec.Command(bin, "run")
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, daemonEnv(db, k, routes)...)
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return MemoryRun{}, err
	}
	exited := make(chan int, 1)
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
		waited <- err
	}()
	err = waitProcessed(ctx, pool, topic, lastIDs, exited, stderr.String, 10*time.Minute)
	elapsed := time.Since(start)
	var peak int64
	if err == nil {
		peak, err = procStatus(cmd.Process.Pid, "VmHWM")
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-waited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-waited
	}
	if err != nil {
		return MemoryRun{}, err
	}
	return MemoryRun{PayloadBytes: size, Events: n, PeakRSSBytes: peak, Seconds: elapsed.Seconds(),
		PerSecond: float64(n) / elapsed.Seconds()}, nil
}

// procStatus reads a "kB" field (VmHWM, VmRSS) of /proc/<pid>/status, in
// bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", field, rest, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func sizeLabel(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// megabytes is n in decimal megabytes (the targets are 200 MB and 512 MB).
func megabytes(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/1e6) }
