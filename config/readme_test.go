package config

import (
	"os"
	"strings"
	"testing"
)

// The README's configuration table lists every variable inboxd reads, so the
// documentation cannot fall behind the code.
func TestREADMEListsEveryVariable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range Variables() {
		if !strings.Contains(string(readme), "`"+v.Name+"`") {
			t.Errorf("README.md does not document %s", v.Name)
		}
	}
}
