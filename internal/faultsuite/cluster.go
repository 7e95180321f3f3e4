package faultsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/testkit"
)

// StopMode is how Cluster.Stop shuts PostgreSQL down (pg_ctl -m).
type StopMode string

const (
	// StopFast rolls back open transactions and disconnects clients, then
	// shuts down cleanly.
	StopFast StopMode = "fast"
	// StopImmediate aborts every server process at once, like a crash;
	// the next start runs crash recovery.
	StopImmediate StopMode = "immediate"
)

// osUser runs PostgreSQL's programs: the server refuses to run as root.
const osUser = "postgres"

// Cluster is a throwaway PostgreSQL cluster for scenarios that stop or
// restart the server; it never touches the machine's shared server. It
// listens on 127.0.0.1 only, on a free port, with trust authentication,
// fsync off and small shared buffers (synchronous_commit stays on: a
// commit must survive an immediate stop, which kills the server processes
// but not the machine, so the OS still has the unsynced pages); its programs run as the postgres OS
// user in a temporary directory owned by that user.
type Cluster struct {
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Dir is the temporary directory (data directory, socket and log).
	Dir string

	bin    string
	t      testing.TB
	mu     sync.Mutex
	closed bool
}

// PostgresBinDir finds the directory of initdb and pg_ctl: `pg_config
// --bindir` when it holds them, else the newest /usr/lib/postgresql/*/bin.
func PostgresBinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server programs (initdb, pg_ctl) found: neither pg_config --bindir nor /usr/lib/postgresql/*/bin")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// NewCluster initialises and starts a cluster for t; it is stopped and
// removed when t ends, whatever the outcome. When t fails, the server log's
// tail is printed.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	bin, err := PostgresBinDir()
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		t.Fatalf("cluster: OS user %s: %v", osUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", clusterDirPattern)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Dir: dir, bin: bin, t: t}
	t.Cleanup(c.Close)
	// Who owns the cluster, for SweepStaleClusters after a crashed run.
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatalf("cluster: chown %s: %v", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	c.Port = freePort(t)
	if out, err := c.pg("initdb", "-D", c.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		t.Fatalf("cluster: initdb: %v\n%s", err, out)
	}
	conf := fmt.Sprintf(`
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = '%s'
fsync = off
full_page_writes = off
shared_buffers = 32MB
max_connections = 200
max_wal_size = 256MB
log_min_messages = warning
log_connections = off
`, c.Port, dir)
	f, err := os.OpenFile(filepath.Join(c.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(c.logFile())
			t.Logf("---- PostgreSQL cluster log (port %d) ----\n%s", c.Port, tail(string(b), 16<<10))
		}
	})
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c
}

func freePort(t testing.TB) int {
	addr := testkit.FreeAddr(t)
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}

func (c *Cluster) dataDir() string { return filepath.Join(c.Dir, "data") }
func (c *Cluster) logFile() string { return filepath.Join(c.Dir, "server.log") }

// pg runs one of PostgreSQL's programs as the postgres OS user.
func (c *Cluster) pg(prog string, args ...string) (string, error) {
	full := append([]string{"-u", osUser, "--", filepath.Join(c.bin, prog)}, args...)
	cmd := exec.Command("runuser", full...)
	cmd.Dir = c.Dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start() error {
	out, err := c.pg("pg_ctl", "-D", c.dataDir(), "-l", c.logFile(), "-w", "-t", "60", "start")
	if err != nil {
		return fmt.Errorf("cluster: pg_ctl start: %v\n%s", err, out)
	}
	return c.waitAccepting(30 * time.Second)
}

// Stop stops the server with the given mode and waits until it is down.
func (c *Cluster) Stop(mode StopMode) error {
	out, err := c.pg("pg_ctl", "-D", c.dataDir(), "-m", string(mode), "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("cluster: pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	return nil
}

// Restart stops the server with mode and starts it again.
func (c *Cluster) Restart(mode StopMode) error {
	if err := c.Stop(mode); err != nil {
		return err
	}
	return c.Start()
}

// Addr is the server's host:port.
func (c *Cluster) Addr() string { return fmt.Sprintf("127.0.0.1:%d", c.Port) }

// URL returns the connection URL of database dbname.
func (c *Cluster) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, dbname)
}

// CreateDatabase creates an empty database.
func (c *Cluster) CreateDatabase(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return err
}

func (c *Cluster) waitAccepting(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster: not accepting connections after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterDirPattern matches the temporary directories of clusters.
const clusterDirPattern = "inboxd-fault-pg-*"

// ownerFile in a cluster directory holds the pid of the test process that
// made it.
const ownerFile = "owner.pid"

// SweepStaleClusters stops and removes the clusters left behind by test
// processes that no longer run (a run killed by its timeout cannot clean
// up), and reports how many it removed.
func SweepStaleClusters() int {
	bin, err := PostgresBinDir()
	if err != nil {
		return 0
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), clusterDirPattern))
	n := 0
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not ours, or being set up right now
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		c := &Cluster{Dir: dir, bin: bin}
		c.Close()
		n++
	}
	return n
}

// processAlive reports whether a process with pid exists.
func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// Close stops the server (immediate) and removes its directory. It is
// idempotent and registered as a cleanup by NewCluster.
func (c *Cluster) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	if _, err := os.Stat(filepath.Join(c.dataDir(), "postmaster.pid")); err == nil {
		_, _ = c.pg("pg_ctl", "-D", c.dataDir(), "-m", "immediate", "-w", "-t", "30", "stop")
	}
	os.RemoveAll(c.Dir)
}
