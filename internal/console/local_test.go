package console

import (
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// GathererLocal reads the routes' and the partitions' gauges of the
// replica's registry.
func TestGathererLocalReadsTheReplicasGauges(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	gauge := func(name string, labels ...string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: name}, labels)
		reg.MustRegister(g)
		return g
	}
	gauge("inboxd_worker_route_running", "event_type").WithLabelValues("a").Set(3)
	gauge("inboxd_worker_route_queued", "event_type").WithLabelValues("a").Set(5)
	c := gauge("inboxd_worker_route_concurrency", "event_type")
	c.WithLabelValues("a").Set(8)
	c.WithLabelValues("other").Set(2)
	lag := gauge("inboxd_ingest_consumer_lag", "topic", "partition")
	lag.WithLabelValues("t", "10").Set(7)
	lag.WithLabelValues("t", "2").Set(1)
	l := GathererLocal(reg)
	if got, want := l.Routes(), []RouteState{{Route: "a", Running: 3, Queued: 5, Concurrency: 8}, {Route: "other", Concurrency: 2}}; !reflect.DeepEqual(got, want) {
		t.Errorf("routes %+v, want %+v", got, want)
	}
	if got, want := l.IngestLag(), []PartitionLag{{Topic: "t", Partition: "2", Lag: 1}, {Topic: "t", Partition: "10", Lag: 7}}; !reflect.DeepEqual(got, want) {
		t.Errorf("lag %+v, want %+v", got, want)
	}
	if GathererLocal(nil).Routes() != nil {
		t.Error("a nil gatherer has routes")
	}
}
