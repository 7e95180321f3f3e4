package vardocs

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the variable table of docs/configuration.md from the code")

// configurationPage is the documentation page that holds the variable table.
const configurationPage = "../../docs/configuration.md"

// splitConfigurationPage returns the page's text before the table's begin
// marker (included), the table, and the text from the end marker on.
func splitConfigurationPage(t *testing.T, page string) (head, table, tail string) {
	t.Helper()
	head, rest, ok := strings.Cut(page, TableBegin+"\n")
	if !ok {
		t.Fatalf("%s has no line %q: the variable table has nowhere to go", configurationPage, TableBegin)
	}
	table, tail, ok = strings.Cut(rest, TableEnd)
	if !ok {
		t.Fatalf("%s has no line %q after the begin marker", configurationPage, TableEnd)
	}
	return head + TableBegin + "\n", table, TableEnd + tail
}

// docs/configuration.md's variable table is written by the code: it must be
// exactly what MarkdownTable writes from Variables, the list `inboxd help`
// prints, so the documentation cannot fall behind the code. With -update
// (make docs) the test writes the table instead.
func TestConfigurationPageIsWrittenByTheCode(t *testing.T) {
	data, err := os.ReadFile(configurationPage)
	if err != nil {
		t.Fatal(err)
	}
	head, table, tail := splitConfigurationPage(t, string(data))
	want, err := MarkdownTable()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if table != want {
			if err := os.WriteFile(configurationPage, []byte(head+want+tail), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote the variable table of %s", configurationPage)
		}
		return
	}
	if table != want {
		t.Errorf("%s: the variable table differs from the code; run `make docs`.\n got:\n%s\nwant:\n%s", configurationPage, table, want)
	}
	for _, v := range Variables() {
		if !strings.Contains(table, "| `"+v.Name+"` |") {
			t.Errorf("%s does not document %s", configurationPage, v.Name)
		}
	}
}

// Every variable is in exactly one section, and a section takes only
// variables that exist.
func TestSectionsTakeEveryVariableOnce(t *testing.T) {
	sections, err := Sections()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, s := range sections {
		if len(s.Variables) == 0 {
			t.Errorf("section %s takes no variable", s.Title)
		}
		for _, v := range s.Variables {
			if prev, ok := seen[v.Name]; ok {
				t.Errorf("%s is in %s and %s", v.Name, prev, s.Title)
			}
			seen[v.Name] = s.Title
		}
	}
	if n := len(Variables()); len(seen) != n {
		t.Errorf("the sections hold %d variables, Variables %d", len(seen), n)
	}
	if matches("INBOXD_KAFKA", []string{"INBOXD_KAFKA_"}) || !matches("INBOXD_UI_TOKEN_FILE", []string{"INBOXD_UI_"}) || matches("INBOXD_RETENTION_X", []string{"INBOXD_RETENTION"}) {
		t.Error("matches: a prefix is a name ending in _, anything else the exact name")
	}
}
