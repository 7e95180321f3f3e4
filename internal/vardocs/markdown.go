package vardocs

import "strings"

// Markers around the variable tables in docs/configuration.md: everything
// between them is written by MarkdownTable (go test ./config -run
// TestConfigurationPageIsWrittenByTheCode -update, or make docs).
const (
	TableBegin = "<!-- BEGIN VARIABLES: written by `make docs` from vardocs.Sections (the list `inboxd help` prints); do not edit by hand -->"
	TableEnd   = "<!-- END VARIABLES -->"
)

// MarkdownTable returns every variable inboxd reads, a section at a time
// (Sections, the one source of `inboxd help`'s list): a heading, the
// section's sentence, and a table with the name, the default ("empty"
// when there is none) and the meaning of each variable.
func MarkdownTable() (string, error) {
	sections, err := Sections()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, s := range sections {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString("### " + s.Title + "\n\n" + s.About + "\n\n")
		b.WriteString("| variable | default | meaning |\n| --- | --- | --- |\n")
		for _, v := range s.Variables {
			def := "empty"
			if v.Default != "" {
				def = "`" + v.Default + "`"
			}
			b.WriteString("| `" + v.Name + "` | " + def + " | " + strings.ReplaceAll(v.Help, "|", `\|`) + " |\n")
		}
	}
	return b.String(), nil
}
