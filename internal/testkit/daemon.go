package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/syncbuf"
)

// ReadyTimeout bounds how long StartDaemon waits for /readyz.
const ReadyTimeout = 60 * time.Second

// logTail is how much of a daemon's log a failing test prints.
const logTail = 48 << 10

// Daemon is one inboxd (or embedder) process started with `run`: the
// harness of the binary's tests (cmd/inboxd) and of the fault suite.
type Daemon struct {
	// Name labels the process in failure output ("a", "replica-2", …).
	Name string

	t     testing.TB
	cmd   *exec.Cmd
	addr  string
	logs  *syncbuf.Buffer
	done  chan struct{}
	state *os.ProcessState

	mu     sync.Mutex
	sigAt  time.Time // when the last SIGTERM/SIGINT was sent
	exitAt time.Time
}

// DaemonSpec describes a process to start.
type DaemonSpec struct {
	// Name labels the process in logs and failure output.
	Name string
	// Binary is the program: cmd/inboxd or an embedding program, built
	// with Build.
	Binary string
	// Env is added to a cleaned copy of the test's environment (every
	// INBOXD_* and FAULT_* variable of the test process is dropped first).
	// INBOXD_HTTP_ADDR is chosen by StartDaemon.
	Env []string
	// Args default to ["run"].
	Args []string
	// NoWait returns as soon as the process started, without waiting for
	// /readyz.
	NoWait bool
}

// StartDaemon starts spec's process, and unless spec.NoWait waits until
// /readyz answers 200. The process is SIGKILLed when the test ends if it
// still runs; when the test failed its log tail is printed; a data race
// reported by the race detector fails the test.
func StartDaemon(t testing.TB, spec DaemonSpec) *Daemon {
	t.Helper()
	addr := FreeAddr(t)
	d := &Daemon{Name: spec.Name, t: t, addr: addr, logs: &syncbuf.Buffer{}, done: make(chan struct{})}
	args := spec.Args
	if len(args) == 0 {
		args = []string{"run"}
	}
	d.cmd = exec.Command(spec.Binary, args...)
	// atexit_sleep_ms=0: the race runtime otherwise sleeps 1s in os.Exit
	// (for late reports from other threads), which would count against
	// every measured exit time.
	d.cmd.Env = append(append(CleanEnv(), "INBOXD_HTTP_ADDR="+addr, "GORACE=atexit_sleep_ms=0"), spec.Env...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	// Its own process group: a signal to the test's group (Ctrl-C) does
	// not reach it, and it never outlives the test by accident.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", d.Label(), err)
	}
	go func() {
		_ = d.cmd.Wait()
		d.mu.Lock()
		d.state = d.cmd.ProcessState
		d.exitAt = time.Now()
		d.mu.Unlock()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die otherwise
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		logs := d.logs.String()
		if strings.Contains(logs, "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race:\n%s", d.Label(), raceReports(logs))
		}
		if t.Failed() {
			t.Logf("---- %s logs (last %d KiB) ----\n%s", d.Label(), logTail>>10, Tail(logs, logTail))
			t.Logf("---- %s: %s; warnings and errors by message ----\n%s", d.Label(), d.exitDescription(), LogDigest(logs, 20))
		}
	})
	if !spec.NoWait {
		d.WaitReady(ReadyTimeout)
	}
	return d
}

// CleanEnv is the test's environment without INBOXD_* and FAULT_*
// variables, so an operator's settings cannot leak into a scenario.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "INBOXD_") || strings.HasPrefix(kv, "FAULT_") || strings.HasPrefix(kv, "GORACE=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// Label names the process for failure output: "daemon a (pid 123)".
func (d *Daemon) Label() string {
	pid := 0
	if d.cmd != nil && d.cmd.Process != nil {
		pid = d.cmd.Process.Pid
	}
	if d.Name == "" {
		return fmt.Sprintf("daemon pid %d", pid)
	}
	return fmt.Sprintf("daemon %s (pid %d)", d.Name, pid)
}

// WaitReady waits until /readyz answers 200, failing the test if the
// process exits first or timeout passes.
func (d *Daemon) WaitReady(timeout time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-d.done:
			d.t.Fatalf("%s exited before it was ready: %s\n%s", d.Label(), d.exitDescription(), Tail(d.logs.String(), logTail))
		default:
		}
		if code, err := d.Readyz(2 * time.Second); err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s not ready after %s", d.Label(), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Readyz performs one GET /readyz with the given client timeout and returns
// the status code.
func (d *Daemon) Readyz(timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.addr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Addr is the daemon's HTTP address (host:port).
func (d *Daemon) Addr() string { return d.addr }

// PID is the process id.
func (d *Daemon) PID() int { return d.cmd.Process.Pid }

// WorkerID is the worker id the daemon writes into locked_by (host-pid).
func (d *Daemon) WorkerID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, d.PID())
}

// Logs returns everything the process wrote to stdout and stderr so far.
func (d *Daemon) Logs() string { return d.logs.String() }

// Done is closed when the process has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Running reports whether the process has not exited yet.
func (d *Daemon) Running() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process. SIGTERM and SIGINT record the time, for
// ExitAfterSignal.
func (d *Daemon) Signal(sig syscall.Signal) {
	d.t.Helper()
	if sig == syscall.SIGTERM || sig == syscall.SIGINT {
		d.mu.Lock()
		d.sigAt = time.Now()
		d.mu.Unlock()
	}
	if err := d.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		d.t.Fatalf("signal %v to %s: %v", sig, d.Label(), err)
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (d *Daemon) Kill() {
	d.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.t.Fatalf("%s still running 30s after SIGKILL", d.Label())
	}
}

// DumpGoroutines sends SIGQUIT: the Go runtime writes every goroutine's
// stack to the log and exits (status 2). Use it on a process that does not
// exit when it should, to see where it hangs. It waits up to 30s for the
// exit.
func (d *Daemon) DumpGoroutines() {
	d.t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGCONT)
	_ = d.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.Kill()
	}
}

// Pause sends SIGSTOP: the process keeps its connections and rows but does
// nothing, like a replica stuck in a long GC pause or a frozen VM.
func (d *Daemon) Pause() { d.Signal(syscall.SIGSTOP) }

// Resume sends SIGCONT.
func (d *Daemon) Resume() { d.Signal(syscall.SIGCONT) }

// WaitExit waits up to timeout for the process to exit and reports whether
// it did, with its exit code (-1 when killed by a signal).
func (d *Daemon) WaitExit(timeout time.Duration) (exited bool, code int) {
	select {
	case <-d.done:
		return true, d.ExitCode()
	case <-time.After(timeout):
		return false, 0
	}
}

// Terminate sends SIGTERM and waits up to timeout for the exit. It returns
// whether the process exited in time, how long the exit took from the
// signal, and the exit code.
func (d *Daemon) Terminate(timeout time.Duration) (exited bool, took time.Duration, code int) {
	d.t.Helper()
	d.Signal(syscall.SIGTERM)
	exited, code = d.WaitExit(timeout)
	if !exited {
		return false, timeout, 0
	}
	return true, d.ExitAfterSignal(), code
}

// ExitAfterSignal is the time from the last SIGTERM/SIGINT to the exit (0
// while running or when no such signal was sent).
func (d *Daemon) ExitAfterSignal() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.sigAt.IsZero() || d.exitAt.IsZero() {
		return 0
	}
	return d.exitAt.Sub(d.sigAt)
}

// ExitCode is the exit code after the process ended (-1 when a signal
// killed it).
func (d *Daemon) ExitCode() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == nil {
		return 0
	}
	return d.state.ExitCode()
}

func (d *Daemon) exitDescription() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == nil {
		return "running"
	}
	return d.state.String()
}

// ExitDescription describes how the process ended ("exit status 0",
// "signal: hangup", …), or "running".
func (d *Daemon) ExitDescription() string { return d.exitDescription() }

// PeakRSS returns the process's peak resident set size (VmHWM from
// /proc/<pid>/status) in bytes. It must be read while the process runs.
func (d *Daemon) PeakRSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", d.PID()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			fields := strings.Fields(rest)
			if len(fields) == 2 && fields[1] == "kB" {
				kb, err := strconv.ParseInt(fields[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status (process exited?)", d.PID())
}

// Tail returns the last n bytes of s from a line start, marked as cut.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "…\n" + s
}

// raceReports extracts the race detector's reports from a log.
func raceReports(logs string) string {
	var out strings.Builder
	for {
		i := strings.Index(logs, "WARNING: DATA RACE")
		if i < 0 {
			break
		}
		logs = logs[i:]
		end := strings.Index(logs, "==================")
		if end < 0 {
			end = len(logs)
		}
		out.WriteString(logs[:end])
		out.WriteString("\n")
		logs = logs[end:]
		if len(logs) > 0 {
			logs = logs[1:]
		}
		if out.Len() > 32<<10 {
			break
		}
	}
	return out.String()
}

// LogDigest counts a zerolog JSON log's warn and error lines by level,
// message and the start of the error, and returns the top lines, most
// frequent first: the shape of a failure at a glance.
func LogDigest(logs string, top int) string {
	counts := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var e struct {
			Level   string `json:"level"`
			Message string `json:"message"`
			Error   string `json:"error"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || (e.Level != "warn" && e.Level != "error" && e.Level != "fatal") {
			continue
		}
		key := e.Level + ": " + e.Message
		if e.Error != "" {
			errText := e.Error
			if len(errText) > 140 {
				errText = errText[:140] + "…"
			}
			key += " — " + errText
		}
		counts[key]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for i, k := range keys {
		if i == top {
			fmt.Fprintf(&b, "  … %d more kinds\n", len(keys)-top)
			break
		}
		fmt.Fprintf(&b, "  %6d× %s\n", counts[k], k)
	}
	if b.Len() == 0 {
		return "  (none)\n"
	}
	return b.String()
}

// LogCount counts the log lines that contain substr.
func (d *Daemon) LogCount(substr string) int {
	return strings.Count(d.logs.String(), substr)
}
