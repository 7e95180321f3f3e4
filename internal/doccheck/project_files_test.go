package doccheck

import (
	"os"
	"strings"
	"testing"
)

// readRepoFile reads a file at the repository's root.
func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + name)
	if err != nil {
		t.Fatalf("%s: %v (the project carries it)", name, err)
	}
	return string(b)
}

// The files a project carries say what they must (issue 27): the Apache
// 2.0 license, how to report a vulnerability and what is supported, the
// two commands, the fault suite and how to run one test; the landing page
// stays short.
func TestProjectFiles(t *testing.T) {
	t.Parallel()
	for name, wants := range map[string][]string{
		"LICENSE":         {"Apache License", "Version 2.0, January 2004", "TERMS AND CONDITIONS"},
		"NOTICE":          {"inboxd"},
		"SECURITY.md":     {"## Supported versions", "## Reporting a vulnerability"},
		"CONTRIBUTING.md": {"make demo", "make test", "make fault", "-run '^Test"},
		"CHANGELOG.md":    {"## [" + strings.TrimSpace(readRepoFile(t, "VERSION")) + "]"},
	} {
		text := readRepoFile(t, name)
		for _, w := range wants {
			if !strings.Contains(text, w) {
				t.Errorf("%s does not say %q", name, w)
			}
		}
	}
	const readmeMax = 200
	if n := strings.Count(readRepoFile(t, "README.md"), "\n"); n > readmeMax {
		t.Errorf("README.md is %d lines, more than %d: it is the landing page; move the detail into docs/", n, readmeMax)
	}
}
