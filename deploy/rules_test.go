package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/internal/doccheck"
	"github.com/inboxd/inboxd/internal/testkit"
)

// rulesRunbookBase is where every alert's runbook_url points: the
// "Runbook: <alert>" headings of docs/operations.md, whose GitHub anchors are
// runbook-<alert in lower case>.
const rulesRunbookBase = "https://github.com/inboxd/inboxd/blob/main/docs/operations.md#runbook-"

// rulesRequired are the alerts the operations docs promise.
var rulesRequired = []string{
	"InboxdDown",               // every replica down (absent)
	"InboxdTargetDown",         // one replica cannot be scraped
	"InboxdMetricsAbsent",      // up, but no inbox gauges
	"InboxdStaleReceivedRows",  // received rows older than INBOXD_STALE_AFTER
	"InboxdWorkersBehind",      // due rows wait for a worker
	"InboxdDeadRows",           // level of dead rows
	"InboxdRejectedRows",       // level of rejected rows
	"InboxdOrderedKeysBlocked", // ordered keys held back by dead rows
	"InboxdIngestNotReady",     // ingest cannot reach brokers or persist
	"InboxdConsumerLagGrowing", // Kafka lag grows
	"InboxdFencedCompletions",  // outcomes fenced
	"InboxdRescuedRows",        // rows rescued from expired leases
	"InboxdOutboxStale",        // the oldest pending outbox row is old
	"InboxdOutboxNoRelay",      // pending outbox rows, no shard held
	"InboxdOutboxDeadRows",     // level of dead outbox rows
	"InboxdRetentionNotRunning",
}

// TestRulesPromtool runs deploy/prometheus/check.sh: promtool check rules and
// the unit tests in inboxd-rules.test.yaml. Without promtool it fails in CI
// (CI=true) and is skipped elsewhere.
func TestRulesPromtool(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		testkit.Unavailable(t, "promtool is not on PATH: run deploy/prometheus/install-promtool.sh (Debian's prometheus package, promtool only) to run the alert rule unit tests")
	}
	cmd := exec.Command("bash", "prometheus/check.sh")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("deploy/prometheus/check.sh: %v\n%s", err, out)
	}
	// Both promtool commands report SUCCESS; make sure both ran.
	if n := strings.Count(string(out), "SUCCESS"); n != 2 {
		t.Fatalf("deploy/prometheus/check.sh printed SUCCESS %d times, want 2:\n%s", n, out)
	}
	t.Logf("%s", out)
}

// TestRulesPrometheusRuleMatches checks that the PrometheusRule carries
// exactly the groups of the plain rules file.
func TestRulesPrometheusRuleMatches(t *testing.T) {
	diff, err := rulesGroupsDiff(embeddedRules, embeddedPrometheusRule)
	if err != nil {
		t.Fatal(err)
	}
	if diff != "" {
		t.Errorf("kubernetes/prometheusrule.yaml spec.groups differ from prometheus/inboxd-rules.yaml groups "+
			"(regenerate it with deploy/prometheus/prometheusrule.sh): %s", diff)
	}
}

// TestRulesPrometheusRuleMismatchDetected makes sure the comparison can fail:
// a changed threshold, a renamed alert, an annotation and a changed kind are all reported.
func TestRulesPrometheusRuleMismatchDetected(t *testing.T) {
	for _, tc := range []struct{ name, old, new string }{
		{"threshold", "> 300", "> 301"},
		{"renamed alert", "      - alert: InboxdDown\n", "      - alert: InboxdDown2\n"},
		{"annotation", "runbook-inboxddeadrows", "runbook-dead"},
	} {
		changed := bytes.Replace(embeddedPrometheusRule, []byte(tc.old), []byte(tc.new), 1)
		if bytes.Equal(changed, embeddedPrometheusRule) {
			t.Fatalf("%s: the PrometheusRule has no %q to change", tc.name, tc.old)
		}
		if diff, err := rulesGroupsDiff(embeddedRules, changed); err == nil && diff == "" {
			t.Errorf("%s: %q -> %q went unnoticed", tc.name, tc.old, tc.new)
		}
	}
	wrongKind := bytes.Replace(embeddedPrometheusRule, []byte("kind: PrometheusRule"), []byte("kind: ConfigMap"), 1)
	if _, err := rulesGroupsDiff(embeddedRules, wrongKind); err == nil {
		t.Error("a PrometheusRule of kind ConfigMap went unnoticed")
	}
}

// rulesGroupsDiff compares the groups of a plain rules file with the
// spec.groups of a PrometheusRule. It returns "" when they are equal, else
// the first differing line; an error when either does not parse or the
// second is not a named monitoring.coreos.com/v1 PrometheusRule.
func rulesGroupsDiff(plainYAML, promRuleYAML []byte) (string, error) {
	var plain struct {
		Groups any `yaml:"groups"`
	}
	if err := yaml.Unmarshal(plainYAML, &plain); err != nil {
		return "", fmt.Errorf("prometheus/inboxd-rules.yaml: %w", err)
	}
	if plain.Groups == nil {
		return "", fmt.Errorf("prometheus/inboxd-rules.yaml has no groups")
	}
	var pr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(promRuleYAML, &pr); err != nil {
		return "", fmt.Errorf("kubernetes/prometheusrule.yaml: %w", err)
	}
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" || pr.Metadata.Name == "" {
		return "", fmt.Errorf("kubernetes/prometheusrule.yaml is %s %s named %q, want a named monitoring.coreos.com/v1 PrometheusRule",
			pr.APIVersion, pr.Kind, pr.Metadata.Name)
	}
	if reflect.DeepEqual(plain.Groups, pr.Spec.Groups) {
		return "", nil
	}
	a, _ := yaml.Marshal(plain.Groups)
	b, _ := yaml.Marshal(pr.Spec.Groups)
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d of the groups: rules file %q, PrometheusRule %q", i+1, x, y), nil
		}
	}
	return "the groups differ in types only", nil
}

// TestRulesAnnotations checks every alert: unique name, an expression that
// parses, a severity, summary, description, and a runbook_url at its anchor in docs/operations.md.
func TestRulesAnnotations(t *testing.T) {
	rf, err := parseRuleFile(embeddedRules)
	if err != nil {
		t.Fatalf("prometheus/inboxd-rules.yaml: %v", err)
	}
	seen := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: rule %q is not an alert", g.Name, r.Record)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			seen[r.Alert] = true
			if _, err := metricNames(r.Expr); err != nil {
				t.Errorf("alert %s: expr: %v", r.Alert, err)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("alert %s: severity %q, want critical or warning", r.Alert, s)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if got, want := r.Annotations["runbook_url"], rulesRunbookBase+strings.ToLower(r.Alert); got != want {
				t.Errorf("alert %s: runbook_url %q, want %q", r.Alert, got, want)
			}
			for k := range r.Annotations {
				if k != "summary" && k != "description" && k != "runbook_url" {
					t.Errorf("alert %s: unexpected annotation %q", r.Alert, k)
				}
			}
		}
	}
	for _, name := range rulesRequired {
		if !seen[name] {
			t.Errorf("alert %s is missing", name)
		}
	}
}

// rulesRunbookPage is the page the runbook_url annotations point into.
const rulesRunbookPage = "../docs/operations.md"

// TestRulesRunbookAnchorsInOperationsPage checks that docs/operations.md has
// a "Runbook: <alert>" heading for every alert's runbook_url anchor, so an
// operator is one click from the runbook. A missing page or heading fails;
// nothing is skipped.
func TestRulesRunbookAnchorsInOperationsPage(t *testing.T) {
	page, err := os.ReadFile(rulesRunbookPage)
	if err != nil {
		t.Fatal(err)
	}
	anchors := doccheck.Anchors(page)
	rf, err := parseRuleFile(embeddedRules)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			u := r.Annotations["runbook_url"]
			_, anchor, ok := strings.Cut(u, "#")
			if !ok || !strings.HasPrefix(u, rulesRunbookBase) || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q: docs/operations.md has no heading with anchor %q (want a heading \"Runbook: %s\")", r.Alert, u, anchor, r.Alert)
			}
		}
	}
	if n < len(rulesRequired) {
		t.Fatalf("%d alerts parsed, want at least %d", n, len(rulesRequired))
	}
	for _, name := range rulesRequired {
		if !anchors["runbook-"+strings.ToLower(name)] {
			t.Errorf("docs/operations.md has no heading \"Runbook: %s\"", name)
		}
	}
}
