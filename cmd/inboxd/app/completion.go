package app

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/inboxd/inboxd/config"
)

// completionCommand is `inboxd completion bash|zsh|fish`: a completion
// script for the shell, written from the table of commands (so it cannot
// miss a command or a flag).
func completionCommand() command {
	return command{name: "completion", args: "SHELL", summary: "print a shell completion script: bash, zsh or fish (source <(inboxd completion bash))", noConfig: true,
		setup: func(fs *flag.FlagSet, a *invocation) func(config.Config) error {
			return func(config.Config) error {
				if len(a.args) != 1 {
					return usageError{fmt.Errorf("completion: give one shell: bash, zsh or fish")}
				}
				return writeCompletion(a.stdout, a.args[0])
			}
		}}
}

// completionWords are the first words of the commands, and per command
// (one or two words) its flags.
func completionWords() (first []string, flags map[string][]string, second map[string][]string) {
	flags, second = map[string][]string{}, map[string][]string{}
	seen := map[string]bool{}
	for _, c := range commands {
		w, rest, two := strings.Cut(c.name, " ")
		if !seen[w] {
			seen[w] = true
			first = append(first, w)
		}
		if two {
			second[w] = append(second[w], rest)
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.setup(fs, &invocation{})
		fs.VisitAll(func(f *flag.Flag) { flags[c.name] = append(flags[c.name], flagName(f)) })
		sort.Strings(flags[c.name])
	}
	return first, flags, second
}

// writeCompletion writes the completion script of shell.
func writeCompletion(w io.Writer, shell string) error {
	first, flags, second := completionWords()
	names := make([]string, 0, len(flags))
	for n := range flags {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	switch shell {
	case "bash":
		b.WriteString("# inboxd completion for bash: source <(inboxd completion bash)\n_inboxd() {\n")
		b.WriteString("  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}\n")
		b.WriteString("  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W \"" + strings.Join(first, " ") + "\" -- \"$cur\")); return; fi\n")
		b.WriteString("  case \"$cmd\" in\n")
		for w, subs := range sortedMap(second) {
			fmt.Fprintf(&b, "    %s) if [ \"$COMP_CWORD\" -eq 2 ]; then COMPREPLY=($(compgen -W \"%s\" -- \"$cur\")); return; fi; cmd=\"%s ${COMP_WORDS[2]}\";;\n",
				w, strings.Join(subs, " "), w)
		}
		b.WriteString("  esac\n  case \"$cmd\" in\n")
		for _, n := range names {
			fmt.Fprintf(&b, "    %q) COMPREPLY=($(compgen -W \"%s\" -- \"$cur\"));;\n", n, strings.Join(flags[n], " "))
		}
		b.WriteString("  esac\n}\ncomplete -F _inboxd inboxd\n")
	case "zsh":
		b.WriteString("#compdef inboxd\n# inboxd completion for zsh: source <(inboxd completion zsh)\n_inboxd() {\n")
		b.WriteString("  local cmd=${words[2]}\n")
		b.WriteString("  if (( CURRENT == 2 )); then compadd -- " + strings.Join(first, " ") + "; return; fi\n")
		b.WriteString("  case $cmd in\n")
		for w, subs := range sortedMap(second) {
			fmt.Fprintf(&b, "    %s) if (( CURRENT == 3 )); then compadd -- %s; return; fi; cmd=\"%s ${words[3]}\";;\n", w, strings.Join(subs, " "), w)
		}
		b.WriteString("  esac\n  case $cmd in\n")
		for _, n := range names {
			fmt.Fprintf(&b, "    %q) compadd -- %s;;\n", n, strings.Join(flags[n], " "))
		}
		b.WriteString("  esac\n}\nif [ \"$funcstack[1]\" = _inboxd ]; then _inboxd \"$@\"; else compdef _inboxd inboxd; fi\n")
	case "fish":
		b.WriteString("# inboxd completion for fish: inboxd completion fish | source\n")
		fmt.Fprintf(&b, "complete -c inboxd -f -n __fish_use_subcommand -a '%s'\n", strings.Join(first, " "))
		for w, subs := range sortedMap(second) {
			fmt.Fprintf(&b, "complete -c inboxd -f -n '__fish_seen_subcommand_from %s' -a '%s'\n", w, strings.Join(subs, " "))
		}
		for _, n := range names {
			last := n[strings.LastIndex(n, " ")+1:]
			for _, f := range flags[n] {
				opt := "-l " + strings.TrimLeft(f, "-")
				if !strings.HasPrefix(f, "--") {
					opt = "-s " + strings.TrimLeft(f, "-")
				}
				fmt.Fprintf(&b, "complete -c inboxd -f -n '__fish_seen_subcommand_from %s' %s\n", last, opt)
			}
		}
	default:
		return usageError{fmt.Errorf("completion: %q is not a shell inboxd completes: bash, zsh or fish", shell)}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sortedMap iterates m in key order.
func sortedMap(m map[string][]string) func(yield func(string, []string) bool) {
	return func(yield func(string, []string) bool) {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !yield(k, m[k]) {
				return
			}
		}
	}
}
