package config

import "strings"

// Markers around the variable table in docs/configuration.md: everything
// between them is written by MarkdownTable (go test ./config -run
// TestConfigurationPageIsWrittenByTheCode -update, or make docs).
const (
	TableBegin = "<!-- BEGIN VARIABLES: written by `make docs` from config.Variables (the list `inboxd help` prints); do not edit by hand -->"
	TableEnd   = "<!-- END VARIABLES -->"
)

// MarkdownTable returns the table of every variable inboxd reads, one row
// per variable in the order of Variables (the one source of `inboxd help`'s
// list): the name, the default ("empty" when there is none) and the
// meaning.
func MarkdownTable() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
	for _, v := range Variables() {
		def := "empty"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		b.WriteString("| `" + v.Name + "` | " + def + " | " + strings.ReplaceAll(v.Help, "|", `\|`) + " |\n")
	}
	return b.String()
}
