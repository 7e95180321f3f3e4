package main

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/deploy"
	"github.com/inboxd/inboxd/migrations/pgtest"
)

// Every metric the Grafana dashboard and the alert rules query exists on a
// running daemon's /metrics (with Kafka ingest and an ordered route, after a
// few events), so no panel stays empty and no alert waits on a metric that
// is never exported.
func TestDashboardAndAlertsQueryExistingMetrics(t *testing.T) {
	t.Parallel()
	queried, err := deploy.QueriedMetrics()
	if err != nil {
		t.Fatal(err)
	}
	db := pgtest.New(t)
	cluster, cl := kafkaEnv(t, 2, "orders")
	routes := writeRoutes(t, "routes:\n  - type: order.created\n    handler: ignore\n    ordered: true\n")
	d := startDaemon(t, kafkaDaemonEnv(db, cluster, "orders", routes)...)
	produce(t, cl, event("o-1", "order.created", "{}"), event("o-2", "order.created", "{}"), event("", "", "no id"))
	waitFor(t, 30*time.Second, "events processed", func() bool { return countStatus(t, db, "processed") == 2 })

	exported := make(map[string]bool)
	waitFor(t, 30*time.Second, "every queried metric exported", func() bool {
		resp, err := http.Get("http://" + d.addr + "/metrics")
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
