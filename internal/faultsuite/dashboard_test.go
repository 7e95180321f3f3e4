package faultsuite

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/deploy"
	"github.com/inboxd/inboxd/internal/testkit"
)

// The tests of this package that are not fault scenarios run in every
// `make test` (the deploy module's QueriedMetrics against a running daemon
// lives here because this module already runs daemons). They need only
// cmd/inboxd with -race, built here once when the suite's TestMain did not
// build every binary.
var (
	raceInboxdOnce sync.Once
	raceInboxd     string
	raceInboxdErr  error
)

// inboxdBinary returns cmd/inboxd built with -race.
func inboxdBinary(t *testing.T) string {
	t.Helper()
	if bins != nil {
		return bins.Inboxd
	}
	raceInboxdOnce.Do(func() {
		root, err := testkit.ModuleDir("github.com/inboxd/inboxd")
		if err != nil {
			raceInboxdErr = err
			return
		}
		dir, err := os.MkdirTemp("", "inboxd-faultsuite-bin-")
		if err != nil {
			raceInboxdErr = err
			return
		}
		raceInboxd = filepath.Join(dir, "inboxd")
		raceInboxdErr = testkit.Build(root, raceInboxd, "./cmd/inboxd", true)
	})
	if raceInboxdErr != nil {
		t.Fatalf("build inboxd: %v", raceInboxdErr)
	}
	return raceInboxd
}

// Every metric the Grafana dashboard and the alert rules query exists on a
// running daemon's /metrics (with Kafka ingest, an ordered route and the
// outbox relay, after a few events and two outbox rows: one published, one
// refused for good and dead at its first attempt), so no panel stays empty and no alert waits on a
// metric that is never exported (labelled counters appear once used).
func TestDashboardAndAlertsQueryExistingMetrics(t *testing.T) {
	t.Parallel()
	queried, err := deploy.QueriedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if len(queried) == 0 {
		t.Fatal("the dashboard and the alert rules query no metric: QueriedMetrics found nothing")
	}
	db := sharedDB(t)
	k := NewKafka(t, "orders", KafkaOptions{Partitions: 2})
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: ignore\n    ordered: true\n")
	createTopic(t, k, "published", 1)
	env := append(baseEnv(db.URL, 2*time.Second, 4, "INBOXD_ROUTES="+routes, "INBOXD_OUTBOX=true",
		"INBOXD_OUTBOX_MAX_ATTEMPTS=1"), k.DaemonEnv("it")...)
	d := StartDaemon(t, DaemonSpec{Name: "dashboard", Binary: inboxdBinary(t), Env: env})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	noID := Record("", "", []byte("no id"))
	noID.Headers = nil
	if err := k.Client.ProduceSync(ctx, Record("o-1", "order.created", []byte("{}")), Record("o-2", "order.created", []byte("{}")), noID).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	// Outbox rows: one published, one too large for the broker (refused
	// without being sent: failed{reason=refused}, then dead).
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (destination, event_type, key, payload)
		VALUES ('kafka:published', 'x.ok', 'a', '{}'), ('kafka:published', 'x.big', 'b', $1)`, make([]byte, 2<<20)); err != nil {
		t.Fatalf("outbox rows: %v", err)
	}
	testkit.WaitFor(t, 30*time.Second, "outbox rows published and dead", func() bool {
		var published, dead int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'published'), count(*) FILTER (WHERE status = 'dead')
			FROM outbox`).Scan(&published, &dead); err != nil {
			t.Fatal(err)
		}
		return published == 1 && dead == 1
	})
	testkit.WaitFor(t, 30*time.Second, "events processed", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE status = 'processed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 2
	})

	exported := make(map[string]bool)
	testkit.WaitFor(t, 30*time.Second, "every queried metric exported", func() bool {
		resp, err := http.Get("http://" + d.Addr() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "#") || line == "" {
				continue
			}
			name := line[:strings.IndexAny(line, "{ ")]
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				name = strings.TrimSuffix(name, suffix)
			}
			exported[name] = true
		}
		for _, m := range queried {
			if m != "up" && !exported[m] {
				return false
			}
		}
		return true
	})
	for _, m := range queried {
		if m != "up" && !exported[m] {
			t.Errorf("%s is queried by the dashboard or the alerts but not exported", m)
		}
	}
}
