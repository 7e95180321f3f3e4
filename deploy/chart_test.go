package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// chartDir is the Helm chart.
const chartDir = "helm/inboxd"

// chartRenderings are the value sets the chart is rendered with for the
// checks kubernetes_test.go applies to the plain manifests.
var chartRenderings = []struct {
	name   string
	values []string // helm template arguments
}{
	{"defaults", nil},
	{"every source", []string{"-f", "testdata/chart-every-source.yaml"}},
}

// helm runs the helm of deploy/go.mod's tool directive (go tool helm:
// built once, then cached by the go command) and returns its standard
// output; a failure returns its standard error as err's text.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "helm"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// helm keeps its caches and configuration out of $HOME.
	dir := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
	if err := cmd.Run(); err != nil {
		return stdout.String(), &helmError{err: err, stderr: stderr.String()}
	}
	return stdout.String(), nil
}

type helmError struct {
	err    error
	stderr string
}

func (e *helmError) Error() string { return e.err.Error() + ": " + e.stderr }

// chartRender renders the chart as release inboxd and decodes every
// document strictly.
func chartRender(t *testing.T, args ...string) []k8sDoc {
	t.Helper()
	out, err := helm(t, append([]string{"template", "inboxd", chartDir}, args...)...)
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	docs, err := k8sDecode("helm template "+strings.Join(args, " "), []byte(out))
	if err != nil {
		t.Fatalf("the chart's rendering does not decode strictly: %v", err)
	}
	return docs
}

// helm lint passes, strictly, with the defaults and with every source on.
func TestChartLint(t *testing.T) {
	for _, r := range chartRenderings {
		out, err := helm(t, append([]string{"lint", "--strict", chartDir}, r.values...)...)
		if err != nil || !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint --strict (%s): %v\n%s", r.name, err, out)
		}
	}
}

// The chart installs what the plain manifests do, and a NetworkPolicy;
// with monitoring on, a ServiceMonitor and a PrometheusRule.
func TestChartObjects(t *testing.T) {
	kinds := func(docs []k8sDoc) []string {
		var out []string
		for _, d := range docs {
			m, _ := metaOf(d.obj)
			out = append(out, d.gvk.Kind+"/"+m.GetName())
		}
		slices.Sort(out)
		return out
	}
	want := []string{"ConfigMap/inboxd-routes", "Deployment/inboxd", "NetworkPolicy/inboxd", "PodDisruptionBudget/inboxd",
		"Service/inboxd", "ServiceAccount/inboxd"}
	if got := kinds(chartRender(t)); !slices.Equal(got, want) {
		t.Errorf("defaults: %v, want %v", got, want)
	}
	want = append(want, "PrometheusRule/inboxd", "ServiceMonitor/inboxd")
	slices.Sort(want)
	if got := kinds(chartRender(t, chartRenderings[1].values...)); !slices.Equal(got, want) {
		t.Errorf("every source: %v, want %v", got, want)
	}
}

// env is a container's literal variables.
func chartEnv(t *testing.T, docs []k8sDoc) map[string]string {
	t.Helper()
	dep := k8sOne[*appsv1.Deployment](t, docs, "inboxd")
	env := map[string]string{}
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	return env
}

// The console is off by default (no token: no action) and its port
// admitted only to the scrapers; on, it needs a token Secret,
// mounted as a file, and its users are admitted. Every source and secret
// comes through a file.
func TestChartConsoleAndSecrets(t *testing.T) {
	def := chartEnv(t, chartRender(t))
	if _, ok := def["INBOXD_UI_TOKEN_FILE"]; ok {
		t.Error("the console has a token by default")
	}
	all := chartRender(t, chartRenderings[1].values...)
	env := chartEnv(t, all)
	for name, want := range map[string]string{
		"INBOXD_UI_TOKEN_FILE": "/secrets/console/token", "INBOXD_AMQP_URL_FILE": "/secrets/amqp/url",
		"INBOXD_NATS_URL_FILE": "/secrets/nats/url", "INBOXD_NATS_CREDS_FILE": "/secrets/nats-creds/creds",
		"INBOXD_KAFKA_SASL_PASSWORD_FILE": "/secrets/kafka-sasl/password", "INBOXD_KAFKA_TLS_CA_FILE": "/secrets/kafka-tls/ca.crt",
		"INBOXD_KAFKA_TOPICS": "orders,payments", "INBOXD_AMQP_QUEUES": "orders", "INBOXD_NATS_STREAMS": "ORDERS",
		"INBOXD_WEBHOOK_ADDR": ":8090", "INBOXD_WEBHOOK_SOURCES": "/etc/inboxd/webhooks.yaml", "INBOXD_OUTBOX": "true",
	} {
		if env[name] != want {
			t.Errorf("every source: %s=%q, want %q", name, env[name], want)
		}
	}
	for name := range env {
		if strings.Contains(name, "PASSWORD") && !strings.HasSuffix(name, "_FILE") || name == "INBOXD_AMQP_URL" || name == "INBOXD_NATS_URL" {
			t.Errorf("every source: %s is set in the pod spec; a secret comes from a file", name)
		}
	}
	np := k8sOne[*networkingv1.NetworkPolicy](t, all, "inboxd")
	if n := len(np.Spec.Ingress[0].From); n != 2 {
		t.Errorf("with the console on, port http admits %d peers, want the scrapers and the console's users", n)
	}
	if len(np.Spec.Ingress) != 2 || len(np.Spec.Ingress[1].From) != 0 {
		t.Errorf("the webhook port is not open to its senders: %+v", np.Spec.Ingress)
	}
	if n := len(k8sOne[*networkingv1.NetworkPolicy](t, chartRender(t), "inboxd").Spec.Ingress[0].From); n != 1 {
		t.Errorf("by default port http admits %d peers, want the scrapers alone", n)
	}
}

// Values that cannot work fail the rendering, naming the value.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"console.enabled=true", "console.existingTokenSecret"},
		{"rabbitmq.enabled=true", "rabbitmq.existingSecret"},
		{"nats.enabled=true,nats.existingSecret=n", "nats.streams"},
		{"kafka.enabled=true", "kafka.brokers"},
		{"webhooks.enabled=true", "webhooks.existingSecret"},
	} {
		_, err := helm(t, "template", "inboxd", chartDir, "--set", c.set)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: %v, want an error naming %s", c.set, err, c.want)
		}
	}
}

// The chart's PrometheusRule carries the groups of
// deploy/prometheus/inboxd-rules.yaml, the one rules file.
func TestChartPrometheusRule(t *testing.T) {
	out, err := helm(t, "template", "inboxd", chartDir, "--set", "metrics.prometheusRule.enabled=true",
		"--show-only", "templates/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	diff, err := rulesGroupsDiff(embeddedRules, []byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if diff != "" {
		t.Errorf("the chart's PrometheusRule differs from prometheus/inboxd-rules.yaml: %s", diff)
	}
}
