package app

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inboxd/inboxd/ingest"
)

// health serves the liveness and readiness endpoints.
type health struct {
	db       *pgxpool.Pool
	consumer *ingest.Consumer // nil without ingest
	started  atomic.Bool      // the workers run
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
	if h.consumer != nil {
		if err := h.consumer.Healthy(); err != nil {
			http.Error(w, "ingest stalled: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

// ready reports whether this replica is doing its work: workers started, the
// database answers, and ingest (when enabled) is persisting batches.
func (h *health) ready(w http.ResponseWriter, r *http.Request) {
	if !h.started.Load() {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := h.db.Ping(ctx); err != nil {
		http.Error(w, "database unreachable", http.StatusServiceUnavailable)
		return
	}
	if h.consumer != nil && !h.consumer.Ready() {
		http.Error(w, "ingest not ready (cannot persist to the database or not consuming yet)", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}
