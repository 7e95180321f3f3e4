package doccheck

import (
	"reflect"
	"testing"
)

func TestAnchors(t *testing.T) {
	t.Parallel()
	md := []byte("# inboxd\n## Operations\n#### Runbook: InboxdDown\n```\n# not a heading\n```\n### Runbook: `InboxdDeadRows`\n" +
		"## The inbox table\n## Go API\n## Notes\n## Notes\n## `inboxd help`, the commands\n#nospace\n## [Linked](x.md) heading\n")
	got := Anchors(md)
	want := map[string]bool{"inboxd": true, "operations": true, "runbook-inboxddown": true, "runbook-inboxddeadrows": true,
		"the-inbox-table": true, "go-api": true, "notes": true, "notes-1": true, "inboxd-help-the-commands": true, "linked-heading": true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("anchors %v, want %v", got, want)
	}
}

func TestLinks(t *testing.T) {
	t.Parallel()
	md := []byte("See [ops](docs/operations.md#runbook-inboxddown) and ![chart](bench/rates.png \"rates\").\n" +
		"`[not](a-link.md)` and [web](https://riverqueue.com)\n```\n[fenced](no.md)\n```\n[ref]: docs/guarantees.md\n")
	var got []string
	for _, l := range Links(md) {
		got = append(got, l.Target)
	}
	want := []string{"docs/operations.md#runbook-inboxddown", "bench/rates.png", "https://riverqueue.com", "docs/guarantees.md"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("links %q, want %q", got, want)
	}
	for target, rel := range map[string]bool{"docs/x.md": true, "#a": true, "../x.md": true, "https://x": false, "mailto:a@b": false, "//cdn/x": false} {
		if IsRelative(target) != rel {
			t.Errorf("IsRelative(%q) = %v", target, !rel)
		}
	}
}
