package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles the package pkg (a path such as "./cmd/inboxd", relative
// to dir) into the program out, with the race detector when race is set, as
// the tests that run it as a process do: a daemon under test is checked for
// data races like the tests themselves. The compiler's output is in the
// error.
func Build(dir, out, pkg string, race bool) error {
	args := []string{"build"}
	if race {
		args = append(args, "-race")
	}
	args = append(args, "-o", out, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, buf.String())
	}
	return nil
}

// ModuleDir returns the directory of the module named path as the module
// in the current directory sees it: the main module's root for
// "github.com/inboxd/inboxd" from any of the repository's modules (each
// replaces it by its relative path).
func ModuleDir(path string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("go list -m %s: %w\n%s", path, err, ee.Stderr)
		}
		return "", fmt.Errorf("go list -m %s: %w", path, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("go list -m %s: module has no directory", path)
	}
	return dir, nil
}

// CurrentModuleDir returns the directory holding go.mod of the module that
// the current directory belongs to.
func CurrentModuleDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}
