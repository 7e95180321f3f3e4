package webhookfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest/webhook"
)

// The secrets of the spec's and GitHub's examples (ingest/webhook's tests
// sign with them).
const (
	specSecret   = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	githubSecret = "It's a Secret to Everybody"
)

// writeFile writes content to a file named name in dir (a sources or a
// secret file) and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseWebhookSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) string { return writeFile(t, dir, name, s) }
	std := write("std.secret", specSecret+"\n\nwhsec_c2Vjb25k\n")
	gh := write("gh.secret", githubSecret+"\n")
	good := fmt.Sprintf(`sources:
  - name: payments
    verify: standard-webhooks
    secret_file: %s
    event_id: {header: webhook-id}
    event_type: {json: type}
    max_body: 512KiB
  - name: git
    verify: github
    secret_file: %s
    unsigned_type: allow
  - name: shop
    verify: hmac-sha256
    header: X-Shop-Hmac
    secret_file: %s
    event_id: {json: id}
    event_type: {value: order.paid}
    key: {json: customer}
`, std, gh, gh)
	srcs, err := parseWebhookSources("w.yaml", []byte(good), os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(srcs) != 3 || len(srcs[0].Secrets) != 2 || srcs[0].MaxBody != 512<<10 ||
		srcs[1].EventID.Body != webhook.BodySHA256 || srcs[1].EventType.Header != "X-GitHub-Event" || !srcs[1].UnsignedType ||
		srcs[2].MaxBody != webhook.DefaultMaxBody {
		t.Fatalf("parsed: %+v", srcs)
	}
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown field":      {"sources:\n  - name: a\n    verify: none\n    event_id: {header: a}\n    event_type: {header: b}\n    colour: red\n", "colour"},
		"duplicate key":      {"sources:\n  - name: a\n    name: b\n    verify: none\n", "already"},
		"duplicate name":     {"sources:\n  - {name: a, verify: none, event_id: {header: a}, event_type: {header: b}}\n  - {name: a, verify: none, event_id: {header: a}, event_type: {header: b}}\n", "used by an earlier source"},
		"bad verify":         {"sources:\n  - {name: a, verify: md5, secret_file: " + gh + ", event_id: {header: a}, event_type: {header: b}}\n", "verify: must be"},
		"no secret file":     {"sources:\n  - {name: a, verify: github}\n", "secret_file: is required"},
		"bad standard key":   {"sources:\n  - {name: a, verify: standard-webhooks, secret_file: " + gh + "}\n", "whsec_"},
		"no id":              {"sources:\n  - {name: a, verify: none, event_type: {header: b}}\n", "event_id: is required"},
		"two places":         {"sources:\n  - {name: a, verify: none, event_id: {header: a, json: b}, event_type: {header: b}}\n", "give one of"},
		"value for id":       {"sources:\n  - {name: a, verify: none, event_id: {value: a}, event_type: {header: b}}\n", "only for event_type"},
		"bad size":           {"sources:\n  - {name: a, verify: none, event_id: {header: a}, event_type: {header: b}, max_body: lots}\n", "max_body"},
		"bad name":           {"sources:\n  - {name: a/b, verify: none, event_id: {header: a}, event_type: {header: b}}\n", "name:"},
		"hmac without hdr":   {"sources:\n  - {name: a, verify: hmac-sha256, secret_file: " + gh + ", event_id: {header: a}, event_type: {header: b}}\n", "header: is required"},
		"missing secret":     {"sources:\n  - {name: a, verify: github, secret_file: /nonexistent/x}\n", "cannot read"},
		"empty":              {"", "empty file"},
		"two documents":      {"sources: []\n---\nsources: []\n", "more than one"},
		"empty list":         {"sources: []\n", "empty"},
		"secret not written": {"sources:\n  - {name: a, verify: standard-webhooks, secret_file: " + gh + "}\n", ""},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseWebhookSources("w.yaml", []byte(tc.yaml), os.ReadFile)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "w.yaml: ") {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "Secret to Everybody") {
				t.Errorf("error shows a secret: %q", err)
			}
		})
	}
	// Several problems: every one, one line each.
	_, err = parseWebhookSources("w.yaml", []byte("sources:\n  - {name: a, verify: nope}\n  - {name: b, verify: none}\n"), os.ReadFile)
	if err == nil || len(strings.Split(err.Error(), "\n")) < 3 {
		t.Fatalf("want several lines, got %v", err)
	}
}

// A secret file carries any secret: every line that is not blank is a
// secret, '#' included (a GitHub secret may start with it); a file of
// several secrets holding a line that starts with '#' (a comment in the
// format of earlier versions, or such a secret) is a start-up error
// rather than a silent skip, and secret_files rotates secrets that start
// with '#' (ingest/webhook's TestWebhookSecretsRotate signs with them).
func TestWebhookSecretFilesCarryAnySecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := func(name, content string) string { return writeFile(t, dir, name, content) }
	const hashSecret, newSecret = "#hash-first-secret", "the-new-secret"
	load := func(yaml string) ([]webhook.SourceConfig, error) {
		p := file("w.yaml", yaml)
		return Load(p, true)
	}
	one, err := load("sources:\n  - {name: g1, verify: github, unsigned_type: allow, secret_file: " + file("one", hashSecret+"\n") + "}\n" +
		"  - {name: g2, verify: github, unsigned_type: allow, secret_files: [" + file("old", hashSecret+"\n") + ", " + file("new", newSecret+"\n") + "]}\n")
	if err != nil {
		t.Fatalf("a secret that starts with '#': %v", err)
	}
	if fmt.Sprint(one[0].Secrets) != "["+hashSecret+"]" || fmt.Sprint(one[1].Secrets) != "["+hashSecret+" "+newSecret+"]" {
		t.Fatalf("secrets %q and %q", one[0].Secrets, one[1].Secrets)
	}
	for name, content := range map[string]string{
		"rotation with a '#' secret": hashSecret + "\n" + newSecret + "\n",
		"old comment":                "# payments, rotated in May\n" + newSecret + "\n",
	} {
		_, err := load("sources:\n  - {name: g, verify: github, unsigned_type: allow, secret_file: " + file("rot", content) + "}\n")
		if err == nil || !strings.Contains(err.Error(), "line 1 starts with '#', in a file of 2 secrets") {
			t.Errorf("%s: %v, want a start-up error naming line 1", name, err)
		}
		if err != nil && (strings.Contains(err.Error(), "hash-first") || strings.Contains(err.Error(), "payments")) {
			t.Errorf("%s: the error quotes the file: %v", name, err)
		}
	}

}

// The sources file allows unsigned ids, types and keys explicitly
// (unsigned_id, unsigned_type, unsigned_key: allow), and says what is
// wrong with an allowance or a replay window, per source.
func TestUnsignedAllowancesFromTheFile(t *testing.T) {
	t.Parallel()
	secret := writeFile(t, t.TempDir(), "s", "s\n")
	srcs, err := parseWebhookSources("w.yaml", []byte(`sources:
  - name: h
    verify: hmac-sha256
    header: X-Sig
    secret_file: `+secret+`
    event_id: {header: X-Id}
    event_type: {header: X-Type}
    key: {header: X-Key}
    unsigned_id: allow
    unsigned_type: allow
    unsigned_key: allow
    replay_window: 24h
`), os.ReadFile)
	if err != nil || !srcs[0].UnsignedID || !srcs[0].UnsignedType || !srcs[0].UnsignedKey || srcs[0].ReplayWindow != 24*time.Hour {
		t.Fatalf("allowed explicitly: %+v, %v", srcs, err)
	}
	_, err = parseWebhookSources("w.yaml", []byte("sources:\n  - {name: h, verify: hmac-sha256, header: X-Sig, secret_file: "+secret+
		", event_id: {json: id}, event_type: {header: X-Type}, unsigned_type: maybe, replay_window: 2h}\n  - {name: s, verify: standard-webhooks, secret_file: "+
		secret+", replay_window: 1h}\n"), os.ReadFile)
	for _, want := range []string{"unsigned_type: must be allow or refuse", "event_type: header X-Type is not signed",
		"source 2 (s): replay_window: only with verify github or hmac-sha256"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to say %q", err, want)
		}
	}
}
