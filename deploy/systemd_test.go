package deploy

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/config"
	"github.com/inboxd/inboxd/internal/testkit"
)

const (
	sdDir      = "systemd"
	sdUnit     = "systemd/inboxd.service"
	sdEnv      = "systemd/inboxd.env"
	sdSysusers = "systemd/inboxd.sysusers"
	sdTmpfiles = "systemd/inboxd.tmpfiles"
	sdCheck    = "systemd/check.sh"
	sdBinary   = "/usr/local/bin/inboxd"
	sdUser     = "inboxd"
)

// sdUnitFile is a parsed unit file: section -> key -> values in order
// (a key may repeat, as ExecStartPre= or SystemCallFilter= do).
type sdUnitFile map[string]map[string][]string

// get returns the last value of key in section (the one systemd uses for
// single-valued settings) and whether it is set.
func (u sdUnitFile) get(section, key string) (string, bool) {
	vs := u[section][key]
	if len(vs) == 0 {
		return "", false
	}
	return vs[len(vs)-1], true
}

// sdParseUnit parses systemd's INI dialect: [Section] headers, Key=Value
// lines, # and ; comments, backslash continuation lines.
func sdParseUnit(data []byte) (sdUnitFile, error) {
	u := sdUnitFile{}
	section := ""
	var pending string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if pending != "" {
			line = pending + " " + line
			pending = ""
		} else if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			pending = strings.TrimSpace(s)
			continue
		}
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			return nil, fmt.Errorf("line %d: %q is neither a section nor Key=Value in one", n, line)
		}
		u[section][strings.TrimSpace(k)] = append(u[section][strings.TrimSpace(k)], strings.TrimSpace(v))
	}
	return u, sc.Err()
}

// sdTimeSpan parses a systemd time span ("40s", "5min", "1min 30s", "90").
func sdTimeSpan(s string) (time.Duration, error) {
	units := map[string]time.Duration{
		"": time.Second, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
		"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
		"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	}
	re := regexp.MustCompile(`^\s*([0-9]+)\s*([a-z]*)`)
	var total time.Duration
	rest := s
	for strings.TrimSpace(rest) != "" {
		m := re.FindStringSubmatch(rest)
		if m == nil {
			return 0, fmt.Errorf("time span %q: cannot parse %q", s, rest)
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		unit, ok := units[m[2]]
		if !ok {
			return 0, fmt.Errorf("time span %q: unknown unit %q", s, m[2])
		}
		total += time.Duration(n) * unit
		rest = rest[len(m[0]):]
	}
	if s == "" {
		return 0, fmt.Errorf("empty time span")
	}
	return total, nil
}

// sdParseEnvFile reads KEY=VALUE lines (comments and blank lines skipped,
// single or double quotes around a whole value removed).
func sdParseEnvFile(data []byte) (map[string]string, error) {
	env := map[string]string{}
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("line %d: %q is not KEY=VALUE", n+1, line)
		}
		if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		if _, dup := env[k]; dup {
			return nil, fmt.Errorf("line %d: %s set twice", n+1, k)
		}
		env[k] = v
	}
	return env, nil
}

// sdKnownVars returns the INBOXD_* variables the daemon reads: the env tags
// of config.Config, plus the migrator URL variables that `inboxd migrate`
// reads (INBOXD_MIGRATE_DATABASE_URL, falling back to INBOXD_DATABASE_URL).
func sdKnownVars() map[string]bool {
	known := map[string]bool{"INBOXD_MIGRATE_DATABASE_URL": true, "INBOXD_MIGRATE_DATABASE_URL_FILE": true}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			f := t.Field(i)
			if tag, ok := f.Tag.Lookup("env"); ok {
				name, _, _ := strings.Cut(tag, ",")
				known[name] = true
			} else if f.Type.Kind() == reflect.Struct {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[config.Config]())
	return known
}

func sdRead(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestSystemdParsers(t *testing.T) {
	u, err := sdParseUnit([]byte("# c\n[Service]\nA=1\nA=2\nB=x \\\n  y\n; c\n[Install]\nC=\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := u.get("Service", "A"); a != "2" || !slices.Equal(u["Service"]["A"], []string{"1", "2"}) {
		t.Errorf("A: got %q", u["Service"]["A"])
	}
	if b, _ := u.get("Service", "B"); b != "x y" {
		t.Errorf("B: got %q", b)
	}
	if _, ok := u.get("Install", "C"); !ok {
		t.Error("C: want set (empty)")
	}
	if _, err := sdParseUnit([]byte("A=1\n")); err == nil {
		t.Error("a key outside a section: want an error")
	}
	for in, want := range map[string]time.Duration{"40s": 40 * time.Second, "90": 90 * time.Second, "1min 30s": 90 * time.Second, "5min": 5 * time.Minute, "2h": 2 * time.Hour} {
		if got, err := sdTimeSpan(in); err != nil || got != want {
			t.Errorf("sdTimeSpan(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "forty", "40 parsecs"} {
		if _, err := sdTimeSpan(bad); err == nil {
			t.Errorf("sdTimeSpan(%q): want an error", bad)
		}
	}
	env, err := sdParseEnvFile([]byte("# c\nA=1\nB='x y'\n"))
	if err != nil || env["A"] != "1" || env["B"] != "x y" {
		t.Errorf("got %v, %v", env, err)
	}
	if _, err := sdParseEnvFile([]byte("A=1\nA=2\n")); err == nil {
		t.Error("a variable set twice: want an error")
	}
	if !sdKnownVars()["INBOXD_SHUTDOWN_TIMEOUT"] || sdKnownVars()["INBOXD_NO_SUCH_THING"] {
		t.Error("sdKnownVars does not reflect config.Config")
	}
}

func TestSystemdUnit(t *testing.T) {
	u, err := sdParseUnit(sdRead(t, sdUnit))
	if err != nil {
		t.Fatalf("%s: %v", sdUnit, err)
	}
	env, err := sdParseEnvFile(sdRead(t, sdEnv))
	if err != nil {
		t.Fatalf("%s: %v", sdEnv, err)
	}
	want := func(key, value string) {
		t.Helper()
		if got, _ := u.get("Service", key); got != value {
			t.Errorf("%s: %s=%q, want %q", sdUnit, key, got, value)
		}
	}
	want("Type", "notify")
	want("NotifyAccess", "main")
	want("WatchdogSec", "30s")
	want("ExecStart", sdBinary+" run")
	want("ExecReload", "/bin/kill -HUP $MAINPID")
	want("Restart", "on-failure")
	want("User", sdUser)
	want("Group", sdUser)
	want("EnvironmentFile", "/etc/inboxd/inboxd.env")
	if pre := u["Service"]["ExecStartPre"]; !slices.Contains(pre, sdBinary+" migrate") {
		t.Errorf("%s: ExecStartPre=%q, want %q", sdUnit, pre, sdBinary+" migrate")
	}
	prevent, _ := u.get("Service", "RestartPreventExitStatus")
	if !slices.Contains(strings.Fields(prevent), "2") {
		t.Errorf("%s: RestartPreventExitStatus=%q, want it to hold 2 (configuration error)", sdUnit, prevent)
	}

	// Stop timing: systemd must not SIGKILL a daemon that is still within
	// its own bound (INBOXD_SHUTDOWN_TIMEOUT + 5 s).
	shutdown, ok := env["INBOXD_SHUTDOWN_TIMEOUT"]
	if !ok {
		t.Fatalf("%s: INBOXD_SHUTDOWN_TIMEOUT is not set explicitly", sdEnv)
	}
	sd, err := time.ParseDuration(shutdown)
	if err != nil {
		t.Fatalf("%s: INBOXD_SHUTDOWN_TIMEOUT=%q: %v", sdEnv, shutdown, err)
	}
	stopValue, ok := u.get("Service", "TimeoutStopSec")
	if !ok {
		t.Fatalf("%s: TimeoutStopSec is not set", sdUnit)
	}
	stop, err := sdTimeSpan(stopValue)
	if err != nil {
		t.Fatalf("%s: TimeoutStopSec: %v", sdUnit, err)
	}
	if stop <= sd+k8sShutdownSlack {
		t.Errorf("%s: TimeoutStopSec=%v must exceed INBOXD_SHUTDOWN_TIMEOUT %v + %v", sdUnit, stop, sd, k8sShutdownSlack)
	}

	// The daemon needs outbound TCP (IPv4/IPv6) and Unix sockets (local
	// PostgreSQL, sd_notify); a filter must leave them.
	fams, _ := u.get("Service", "RestrictAddressFamilies")
	for _, f := range []string{"AF_INET", "AF_INET6", "AF_UNIX"} {
		if !slices.Contains(strings.Fields(fams), f) {
			t.Errorf("%s: RestrictAddressFamilies=%q lacks %s", sdUnit, fams, f)
		}
	}
}

func TestSystemdEnvFile(t *testing.T) {
	env, err := sdParseEnvFile(sdRead(t, sdEnv))
	if err != nil {
		t.Fatalf("%s: %v", sdEnv, err)
	}
	known := sdKnownVars()
	for k := range env {
		if strings.HasPrefix(k, "INBOXD_") && !known[k] {
			t.Errorf("%s: %s is not a variable inboxd reads", sdEnv, k)
		}
	}
	// The daemon's own parser accepts the file as it is.
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	if _, err := config.Load(environ); err != nil {
		t.Errorf("%s: config.Load: %v", sdEnv, err)
	}
	urls := map[string]*url.URL{}
	for _, k := range []string{"INBOXD_DATABASE_URL", "INBOXD_MIGRATE_DATABASE_URL"} {
		v, ok := env[k]
		if !ok {
			t.Errorf("%s: %s is not set", sdEnv, k)
			continue
		}
		u, err := url.Parse(v)
		if err != nil || u.Scheme != "postgres" || u.User == nil {
			t.Errorf("%s: %s=%q: want postgres://role@host/db", sdEnv, k, v)
			continue
		}
		if _, hasPassword := u.User.Password(); hasPassword {
			t.Errorf("%s: %s: the example must not carry a password", sdEnv, k)
		}
		urls[k] = u
	}
	if a, b := urls["INBOXD_DATABASE_URL"], urls["INBOXD_MIGRATE_DATABASE_URL"]; a != nil && b != nil && a.User.Username() == b.User.Username() {
		t.Errorf("%s: the runtime and migrator URLs use the same role %q", sdEnv, a.User.Username())
	}
	if addr := env["INBOXD_HTTP_ADDR"]; !strings.HasSuffix(addr, ":"+strconv.Itoa(k8sHTTPPort)) {
		t.Errorf("%s: INBOXD_HTTP_ADDR=%q, want port %d", sdEnv, addr, k8sHTTPPort)
	}
	if r := env["INBOXD_ROUTES"]; filepath.Dir(r) != "/etc/inboxd" {
		t.Errorf("%s: INBOXD_ROUTES=%q, want a file in /etc/inboxd (made by %s)", sdEnv, r, sdTmpfiles)
	}
}

// TestSystemdInstallFiles checks that sysusers.d and tmpfiles.d create what
// the unit needs: the user and group, and /etc/inboxd readable by the group
// only, with the env and routes files' modes.
func TestSystemdInstallFiles(t *testing.T) {
	var user bool
	for _, line := range strings.Split(string(sdRead(t, sdSysusers)), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "u" && f[1] == sdUser {
			user = true
		}
	}
	if !user {
		t.Errorf("%s: no `u %s …` line", sdSysusers, sdUser)
	}
	lines := map[string][]string{}
	for _, line := range strings.Split(string(sdRead(t, sdTmpfiles)), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && !strings.HasPrefix(f[0], "#") {
			lines[f[1]] = f
		}
	}
	for path, want := range map[string][]string{
		"/etc/inboxd":             {"d", "0750", "root", sdUser},
		"/etc/inboxd/inboxd.env":  {"z", "0640", "root", sdUser},
		"/etc/inboxd/routes.yaml": {"z", "0640", "root", sdUser},
	} {
		f := lines[path]
		if f == nil {
			t.Errorf("%s: no line for %s", sdTmpfiles, path)
			continue
		}
		if got := []string{f[0], f[2], f[3], f[4]}; !slices.Equal(got, want) {
			t.Errorf("%s: %s: got %q, want %q", sdTmpfiles, path, got, want)
		}
	}
}

// sdRunCheck runs check.sh from dir (a copy of deploy/systemd or the real
// one) and returns its output and error.
func sdRunCheck(t *testing.T, dir string) (string, error) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(dir, "check.sh"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// sdCopyDir copies deploy/systemd into a temporary directory, with edit
// applied to the unit file.
func sdCopyDir(t *testing.T, edit func(unit string) string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(sdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		data := sdRead(t, filepath.Join(sdDir, e.Name()))
		if e.Name() == "inboxd.service" {
			data = []byte(edit(string(data)))
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSystemdAnalyze runs deploy/systemd/check.sh (systemd-analyze verify,
// systemd-analyze security --offline=yes with a 2.5 ceiling, and the
// sysusers/tmpfiles install steps in a --root tree), then shows that the
// script fails on a broken or weakly sandboxed unit.
func TestSystemdAnalyze(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		testkit.Unavailable(t, "systemd-analyze is not on PATH: install Debian's systemd package to check the unit")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		testkit.Unavailable(t, "bash is not on PATH")
	}
	out, err := sdRunCheck(t, sdDir)
	t.Logf("%s:\n%s", sdCheck, out)
	if err != nil {
		t.Fatalf("%s failed: %v", sdCheck, err)
	}
	if !strings.Contains(out, "ok: systemd-analyze verify") || !strings.Contains(out, "ok: systemd-analyze security") {
		t.Fatalf("%s did not report both checks", sdCheck)
	}

	for _, tc := range []struct {
		name, want string
		edit       func(string) string
	}{
		{"misspelt value", "systemd-analyze verify printed warnings", func(u string) string {
			return strings.Replace(u, "Type=notify", "Type=notfy", 1)
		}},
		{"unknown directive", "systemd-analyze verify printed warnings", func(u string) string {
			return strings.Replace(u, "[Service]\n", "[Service]\nWatchDogSec=30s\n", 1)
		}},
		{"binary path", "systemd-analyze verify", func(u string) string {
			return strings.Replace(u, "ExecStart="+sdBinary, "ExecStart=/usr/bin/inboxd", 1)
		}},
		{"no sandbox", "above 2.5", func(u string) string {
			// Keep everything up to the sandbox block, drop the block.
			head, _, _ := strings.Cut(u, "# Sandbox:")
			return head + "\n[Install]\nWantedBy=multi-user.target\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := sdRunCheck(t, sdCopyDir(t, tc.edit))
			if err == nil {
				t.Fatalf("check.sh passed a unit with a %s:\n%s", tc.name, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("check.sh failed, but not with %q:\n%s", tc.want, out)
			}
		})
	}
}
