package archcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/testkit"
)

// brokerClients are the modules of the brokers' client libraries: a program
// that imports only the root package and handlers links none of them, the
// sources and publishers an embedder picks bring theirs.
var brokerClients = []string{
	"github.com/segmentio/kafka-go",
	"github.com/twmb/franz-go",
	"github.com/rabbitmq/amqp091-go",
	"github.com/nats-io/nats.go",
}

// The probe's ceilings, which only come down: the modules it links (its own
// included; 51 when issue 26 counted them, 39 once the sources and the
// outbox's publishers were given to the root package rather than imported
// by it, 27 once migrations stopped linking jackc/tern and sprig; the
// issue's target was 30) and the broker clients it may still link (all four
// then, none since).
var (
	probeModules        = 27
	probeBrokersAllowed = map[string]bool{}
)

// TestEmbedderLinks builds testdata/probe, the least an embedder writes
// (the root package and handlers), and holds what it links to the ceilings
// above: no broker client beyond those allowed, at most probeModules
// modules. With -v it prints the modules and the binary's size.
func TestEmbedderLinks(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	modules := buildProbe(t, dir, "probe")
	t.Logf("modules: %s", strings.Join(modules, " "))
	if !own {
		return
	}
	if len(modules) > probeModules {
		t.Errorf("the probe links %d modules, more than %d", len(modules), probeModules)
	}
	for _, m := range modules {
		for _, b := range brokerClients {
			if m == b && !probeBrokersAllowed[b] {
				t.Errorf("the probe links the broker client %s: the root package or handlers import a source or publisher", b)
			}
		}
	}
}

// sourceProbes are programs of the root package, handlers and one source's
// package each (testdata/probe<kind>), its source in Config.Sources and,
// but for webhooks, its publisher in Config.Outbox.Publishers, with the
// broker clients each links: a source's package brings its own broker's
// clients (for Kafka, kafka-go for the source and franz-go for the
// publisher) and no other.
var sourceProbes = []struct {
	dir     string
	brokers []string // none for webhooks
}{
	{"probeamqp", []string{"github.com/rabbitmq/amqp091-go"}},
	{"probekafka", []string{"github.com/segmentio/kafka-go", "github.com/twmb/franz-go"}},
	{"probenats", []string{"github.com/nats-io/nats.go"}},
	{"probewebhook", nil},
}

// TestEachSourceLinksItsBrokerAlone builds the source probes and fails
// when one links a broker client other than its source's, or not each of
// its own. With -v it prints each probe's modules and size.
func TestEachSourceLinksItsBrokerAlone(t *testing.T) {
	t.Parallel()
	dir, own := root(t)
	for _, p := range sourceProbes {
		t.Run(p.dir, func(t *testing.T) {
			t.Parallel()
			if _, err := os.Stat(filepath.Join(dir, "internal", "archcheck", "testdata", p.dir)); err != nil && !own {
				t.Skip("another tree: no such probe")
			}
			modules := buildProbe(t, dir, p.dir)
			linked := map[string]bool{}
			for _, m := range modules {
				linked[m] = true
			}
			for _, b := range brokerClients {
				switch ours := slices.Contains(p.brokers, b); {
				case ours && !linked[b]:
					t.Errorf("%s does not link %s: the probe no longer uses its source or its publisher", p.dir, b)
				case !ours && linked[b]:
					t.Errorf("%s links the broker client %s: its source's package imports another broker's code", p.dir, b)
				}
			}
		})
	}
}

// buildProbe builds the program testdata/<name> of the tree at dir and
// returns the modules it links (go version -m), logging how many and the
// binary's size.
func buildProbe(t *testing.T, dir, name string) []string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	if err := testkit.Build(filepath.Join(dir, "internal", "archcheck"), bin, "./testdata/"+name, false); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	modules := LinkedModules(string(out))
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d modules, %.1f MB", name, len(modules), float64(fi.Size())/1e6)
	return modules
}
