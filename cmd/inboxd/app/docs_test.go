package app

import (
	"os"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/vardocs"
)

// docVariable is one row of a variable table: name, default, meaning.
type docVariable struct{ name, def, help string }

// helpVariables parses the environment section of `inboxd help`.
func helpVariables(t *testing.T, out string) []docVariable {
	t.Helper()
	_, env, ok := strings.Cut(out, "VARIABLE")
	if !ok {
		t.Fatalf("help has no variable table:\n%s", out)
	}
	var vars []docVariable
	for _, l := range strings.Split(env, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 3 || !strings.HasPrefix(f[0], "INBOXD_") {
			continue
		}
		// The meaning is the rest of the line after the default's column.
		rest := strings.TrimSpace(l)[len(f[0]):]
		rest = strings.TrimSpace(rest)[len(f[1]):]
		def := f[1]
		if def == "-" {
			def = ""
		}
		vars = append(vars, docVariable{f[0], def, strings.TrimSpace(rest)})
	}
	return vars
}

// pageVariables parses the rows of docs/configuration.md's variable table.
func pageVariables(t *testing.T, page string) []docVariable {
	t.Helper()
	_, rest, ok := strings.Cut(page, vardocs.TableBegin)
	if !ok {
		t.Fatal("docs/configuration.md has no variable table")
	}
	table, _, _ := strings.Cut(rest, vardocs.TableEnd)
	var vars []docVariable
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "| `INBOXD_") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(strings.Trim(l, "| "), `\|`, "\x00"), " | ")
		if len(cells) != 3 {
			t.Errorf("docs/configuration.md: row %q has %d cells, want 3", l, len(cells))
			continue
		}
		def := strings.Trim(cells[1], "`")
		if def == "empty" {
			def = ""
		}
		vars = append(vars, docVariable{strings.Trim(cells[0], "`"), def, strings.ReplaceAll(cells[2], "\x00", "|")})
	}
	return vars
}

// docs/configuration.md lists the variables `inboxd help` prints, in its
// order, with the same defaults and meanings (the page is written from the
// same list by `make docs`; config's TestConfigurationPageIsWrittenByTheCode
// checks it against the code).
func TestConfigurationPageMatchesHelp(t *testing.T) {
	t.Parallel()
	code, out, _ := runMain(t, nil, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	page, err := os.ReadFile("../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	help, doc := helpVariables(t, out), pageVariables(t, string(page))
	if len(help) == 0 {
		t.Fatal("no variable parsed from help")
	}
	for i := 0; i < len(help) || i < len(doc); i++ {
		switch {
		case i >= len(doc):
			t.Errorf("docs/configuration.md lacks %s (row %d of help)", help[i].name, i+1)
		case i >= len(help):
			t.Errorf("docs/configuration.md lists %s, which help does not", doc[i].name)
		case help[i] != doc[i]:
			t.Errorf("row %d: help %+v, docs/configuration.md %+v", i+1, help[i], doc[i])
		}
	}
}
