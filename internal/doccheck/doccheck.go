// Package doccheck reads the repository's Markdown the way GitHub renders it:
// the anchors of its headings and its relative links. The link check
// (TestRelativeLinksResolve, run by `make lint` and `make test`) and the alert
// rules' runbook test (deploy/rules_test.go) share it, so both compute an
// anchor the same way.
package doccheck

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// headingPunct is what GitHub drops from a heading to make its anchor: every
// character but letters, digits, '-', '_' and spaces.
var headingPunct = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)

// Slug is GitHub's anchor for a heading's text: lower case, inline code marks
// and punctuation dropped, each space a '-'.
func Slug(heading string) string {
	text := strings.ReplaceAll(strings.TrimSpace(heading), "`", "")
	text = stripLinks(text)
	return strings.ReplaceAll(headingPunct.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
}

// inlineLink is [text](target): a heading that holds one is anchored by its text.
var inlineLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func stripLinks(s string) string { return inlineLink.ReplaceAllString(s, "$1") }

// Anchors returns the GitHub anchors of a Markdown document's ATX headings
// (outside fenced code blocks); a repeated heading gets -1, -2, … as on GitHub.
func Anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if isFence(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		text, ok := headingText(line)
		if !ok {
			continue
		}
		a := Slug(text)
		if n := count[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		count[a]++
	}
	return out
}

func isFence(line string) bool {
	t := strings.TrimLeft(line, " ")
	return strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")
}

// headingText returns the text of an ATX heading line ("## Text").
func headingText(line string) (string, bool) {
	if !strings.HasPrefix(line, "#") {
		return "", false
	}
	level := len(line) - len(strings.TrimLeft(line, "#"))
	rest := line[level:]
	if level > 6 || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
		return "", false
	}
	return strings.TrimSpace(strings.TrimRight(strings.TrimSpace(rest), "#")), true
}

// Link is one link of a document: its target as written, and its line.
type Link struct {
	Target string
	Line   int
}

var (
	// linkRe finds inline links and images: [text](target "title") and ![alt](target).
	linkRe = regexp.MustCompile(`\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// refDefRe finds reference definitions: [label]: target
	refDefRe = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	// codeSpan is inline code, whose text is never a link.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
)

// Links returns every link target of a Markdown document outside code
// (fenced blocks and inline code spans), with its line number.
func Links(md []byte) []Link {
	var out []Link
	inFence := false
	sc := bufio.NewScanner(bytes.NewReader(md))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if isFence(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		if m := refDefRe.FindStringSubmatch(line); m != nil {
			out = append(out, Link{Target: m[1], Line: n})
			continue
		}
		for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
			out = append(out, Link{Target: m[1], Line: n})
		}
	}
	return out
}

// IsRelative reports whether a link target points into the repository: not
// a URL with a scheme (https:, mailto:) and not protocol-relative.
func IsRelative(target string) bool {
	if target == "" || strings.HasPrefix(target, "//") {
		return false
	}
	if i := strings.IndexAny(target, ":/?#"); i > 0 && target[i] == ':' {
		return false
	}
	return true
}
