package app

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inboxd/inboxd"
)

// health serves the liveness and readiness endpoints; what they answer is
// the engine's (inboxd.Inboxd's Healthy and Ready).
type health struct {
	engine *inboxd.Inboxd
}

// register adds /healthz, /readyz and (with a gatherer) /metrics to mux.
func (h *health) register(mux *http.ServeMux, metrics prometheus.Gatherer) {
	if metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", h.live)
	mux.HandleFunc("GET /readyz", h.ready)
}

// live fails only when restarting the process would help: the Kafka fetch
// loop is stuck. A database outage is not a liveness failure.
func (h *health) live(w http.ResponseWriter, _ *http.Request) {
	if err := h.engine.Healthy(); err != nil {
		http.Error(w, "ingest stalled: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// ready reports whether this replica is doing its work: workers started, the
// database answers, and ingest (when enabled) is persisting batches.
func (h *health) ready(w http.ResponseWriter, r *http.Request) {
	if err := h.engine.Ready(r.Context()); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}
