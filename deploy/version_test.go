package deploy

import (
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// readVersion is the repository's VERSION: the one place the version is
// written.
func readVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" || strings.HasPrefix(v, "v") || strings.Count(v, ".") < 2 {
		t.Fatalf("VERSION holds %q, want a semantic version without a leading v (0.4.0)", v)
	}
	return v
}

// Everything that carries the version takes VERSION's: the chart's
// version and appVersion, the changelog's newest release (the manifests'
// and docs' image tags: TestK8sImageReferenceEverywhere; the Dockerfile:
// k8sReadDockerfile; the binary: make build's -ldflags).
func TestVersionEverywhere(t *testing.T) {
	want := readVersion(t)
	b, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != want || chart.AppVersion != want {
		t.Errorf("%s/Chart.yaml: version %q, appVersion %q, want VERSION %q for both", chartDir, chart.Version, chart.AppVersion, want)
	}
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(changelog), "\n## ["+want+"]") {
		t.Errorf("CHANGELOG.md has no section ## [%s]", want)
	}
}
