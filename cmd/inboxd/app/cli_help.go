package app

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/inboxd/inboxd/internal/vardocs"
)

// writeShortUsage prints the commands, one line each, for a missing or
// unknown command.
func writeShortUsage(w io.Writer) {
	var b bytes.Buffer
	b.WriteString("usage: inboxd <command> [flags]\n\ncommands:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	_ = tw.Flush()
	b.WriteString("\n`inboxd help` lists every flag and every INBOXD_* environment variable.\n")
	_, _ = w.Write(b.Bytes())
}

// writeHelp prints every command with its flags, then every INBOXD_*
// variable with its default and meaning (from vardocs.Variables, the one
// list Load reads).
func writeHelp(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString("usage: inboxd <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs, &invocation{})
		b.WriteString("\n")
		writeCommandUsage(&b, c, fs, "  ")
	}
	b.WriteString("\nExit codes: 0 success, 1 failure (requeue and discard: also when no row matched), 2 bad usage or configuration.\n")
	b.WriteString("\nenvironment (durations in Go syntax such as 250ms, 30s, 5m; *_FILE variables read a secret from a file):\n")
	sections, err := vardocs.Sections()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tMEANING")
	for _, s := range sections {
		fmt.Fprintf(tw, "\t\t\n  %s:\t\t\n", strings.ToLower(s.Title))
		for _, v := range s.Variables {
			def := v.Default
			if def == "" {
				def = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, def, v.Help)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}

// writeCommandHelp is a command's -h output.
func writeCommandHelp(w io.Writer, c command, fs *flag.FlagSet) {
	var b bytes.Buffer
	writeCommandUsage(&b, c, fs, "")
	_, _ = w.Write(b.Bytes())
}

// writeCommandUsage prints c's synopsis, summary and flags, indented.
func writeCommandUsage(b *bytes.Buffer, c command, fs *flag.FlagSet, indent string) {
	fmt.Fprintf(b, "%sinboxd %s\n", indent, synopsis(c, fs))
	fmt.Fprintf(b, "%s    %s\n", indent, c.summary)
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flag.UnquoteUsage(f)
		name := flagName(f)
		if arg != "" {
			name += " " + strings.ToUpper(arg)
		}
		if !isZeroDefault(f) {
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "%s      %s\t%s\n", indent, name, usage)
	})
	_ = tw.Flush()
}

// synopsis is "name [--flag] [--flag V] ARGS".
func synopsis(c command, fs *flag.FlagSet) string {
	parts := []string{c.name}
	fs.VisitAll(func(f *flag.Flag) {
		arg, _ := flag.UnquoteUsage(f)
		if arg == "" {
			parts = append(parts, "["+flagName(f)+"]")
		} else {
			parts = append(parts, "["+flagName(f)+" "+strings.ToUpper(arg)+"]")
		}
	})
	if c.args != "" {
		parts = append(parts, c.args)
	}
	return strings.Join(parts, " ")
}

// flagName is how help writes a flag: -o for a one-letter flag, --name
// for the others.
func flagName(f *flag.Flag) string {
	if len(f.Name) == 1 {
		return "-" + f.Name
	}
	return "--" + f.Name
}

func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "false", "0":
		return true
	}
	return false
}
