package main

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// With an OTLP endpoint set, every attempt is a span exported over
// OTLP/HTTP, whose parent is the W3C traceparent the event carried in its
// headers.
func TestTracingSpansFollowTheTraceparent(t *testing.T) {
	t.Parallel()
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	var mu sync.Mutex
	type span struct{ trace, parent, name string }
	var spans []span
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not a trace export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans = append(spans, span{hex.EncodeToString(s.TraceId), hex.EncodeToString(s.ParentSpanId), s.Name})
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(collector.Close)

	db := pgtest.New(t)
	startDaemon(t, "INBOXD_DATABASE_URL="+db.URL, "INBOXD_ROUTES="+writeRoutes(t, "routes:\n  - type: traced\n    handler: ignore\n"),
		"OTEL_EXPORTER_OTLP_ENDPOINT="+collector.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO inbox (source, event_id, event_type, headers) VALUES ('orders', 't-1', 'traced', $1)`,
		`{"traceparent": "00-`+traceID+`-`+parentID+`-01"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the attempt's span exported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range spans {
			if s.trace == traceID && s.parent == parentID && s.name == "inboxd traced" {
				return true
			}
		}
		return false
	})
}
