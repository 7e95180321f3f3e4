package console

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/internal/driver"
)

// Local is what the console shows of the replica it runs in (inboxd run):
// its routes' running and queued rows and its ingest lag. `inboxd ui`
// alone has none and passes nil.
type Local interface {
	// Routes returns the state of each route in this replica, by event
	// type.
	Routes() []RouteState
	// IngestLag returns the consumer lag of each partition this replica
	// reads; nil without ingest.
	IngestLag() []PartitionLag
}

// RouteState is one route in this replica.
type RouteState struct {
	// Route is the route's event type ("other" for the default route, as
	// the metrics label it).
	Route                        string
	Running, Queued, Concurrency int64
	// Breaker is the route's circuit breaker in this replica: closed,
	// open or half-open ("" when the replica has no figure for it).
	Breaker string
}

// breakerStates names the values of inboxd_route_breaker_state.
var breakerStates = map[float64]string{0: "closed", 1: "open", 2: "half-open"}

// localBreakers returns the breaker state of each route in l, by driver
// route name, for ops.Config.Breakers (nil without l).
func localBreakers(l Local) func() map[string]string {
	if l == nil {
		return nil
	}
	return func() map[string]string {
		out := map[string]string{}
		for _, rs := range l.Routes() {
			if rs.Breaker != "" {
				out[driverRoute(rs.Route)] = rs.Breaker
			}
		}
		return out
	}
}

// driverRoute is the route named label in the metrics ("other": the
// default route) as the route controls name it.
func driverRoute(label string) string {
	if label == "other" {
		return driver.DefaultRoute
	}
	return label
}

// PartitionLag is the consumer lag of one partition.
type PartitionLag struct {
	Topic     string
	Partition string
	// Lag is in messages: the high-water mark minus the committed offset.
	Lag int64
}

// GathererLocal reads Local from the replica's metrics: the gauges
// inboxd_worker_route_running, _queued and _concurrency, and
// inboxd_ingest_consumer_lag.
func GathererLocal(g prometheus.Gatherer) Local { return gathererLocal{g} }

// gathererLocal is GathererLocal's Local.
type gathererLocal struct{ g prometheus.Gatherer }

// gauges returns the gauge values of the families named, by family, each
// sample with its labels.
func (l gathererLocal) gauges(names ...string) map[string][]sample {
	out := map[string][]sample{}
	if l.g == nil {
		return out
	}
	fams, err := l.g.Gather()
	if err != nil {
		return out
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	for _, f := range fams {
		if !want[f.GetName()] {
			continue
		}
		for _, m := range f.GetMetric() {
			s := sample{labels: map[string]string{}}
			for _, lp := range m.GetLabel() {
				s.labels[lp.GetName()] = lp.GetValue()
			}
			if m.GetGauge() != nil {
				s.value = m.GetGauge().GetValue()
			}
			out[f.GetName()] = append(out[f.GetName()], s)
		}
	}
	return out
}

// sample is one gauge value with its labels.
type sample struct {
	labels map[string]string
	value  float64
}

// Routes implements Local.
func (l gathererLocal) Routes() []RouteState {
	g := l.gauges("inboxd_worker_route_running", "inboxd_worker_route_queued", "inboxd_worker_route_concurrency", "inboxd_route_breaker_state")
	by := map[string]*RouteState{}
	get := func(t string) *RouteState {
		if by[t] == nil {
			by[t] = &RouteState{Route: t}
		}
		return by[t]
	}
	for _, s := range g["inboxd_worker_route_running"] {
		get(s.labels["event_type"]).Running = int64(s.value)
	}
	for _, s := range g["inboxd_worker_route_queued"] {
		get(s.labels["event_type"]).Queued = int64(s.value)
	}
	for _, s := range g["inboxd_worker_route_concurrency"] {
		get(s.labels["event_type"]).Concurrency = int64(s.value)
	}
	for _, s := range g["inboxd_route_breaker_state"] {
		get(s.labels["route"]).Breaker = breakerStates[s.value]
	}
	var out []RouteState
	for _, r := range by {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Route < out[j].Route })
	return out
}

// IngestLag implements Local.
func (l gathererLocal) IngestLag() []PartitionLag {
	var out []PartitionLag
	for _, s := range l.gauges("inboxd_ingest_consumer_lag")["inboxd_ingest_consumer_lag"] {
		out = append(out, PartitionLag{Topic: s.labels["topic"], Partition: s.labels["partition"], Lag: int64(s.value)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		a, _ := strconv.Atoi(out[i].Partition)
		b, _ := strconv.Atoi(out[j].Partition)
		return a < b
	})
	return out
}
