package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// An http route with batch: POSTs its rows many at a time as one JSON
// array and takes each row's outcome from the response: rows the answer
// names dead go dead, rows it asks to retry come again, the others are
// processed.
func TestHTTPBatchRoute(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	posts, most := 0, 0
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var els []struct {
			ID      string `json:"id"`
			Attempt int    `json:"attempt"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(body, &els); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		posts++
		most = max(most, len(els))
		var results []map[string]any
		for _, el := range els {
			seen[el.ID]++
			switch {
			case el.ID == "ev-7":
				results = append(results, map[string]any{"id": el.ID, "status": "dead", "error": "unknown customer"})
			case el.ID == "ev-9" && el.Attempt == 1:
				results = append(results, map[string]any{"id": el.ID, "status": "retry", "error": "busy"})
			}
		}
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
	}))
	defer srv.Close()
	db := pgtest.New(t)
	routes := "routes:\n  - type: order.exported\n    handler: http\n    url: " + srv.URL + "\n    batch: {max_rows: 40, max_wait: 20ms}\n"
	env := []string{"INBOXD_DATABASE_URL=" + db.URL, "INBOXD_HTTP_ADDR=", "INBOXD_ROUTES=" + writeRiverRoutes(t, routes),
		"INBOXD_BACKOFF_BASE=20ms", "INBOXD_BACKOFF_MAX=50ms", "INBOXD_POLL_INTERVAL=50ms"}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO inbox (source, event_id, event_type, payload)
		SELECT 'orders', 'ev-' || i, 'order.exported', '{"n": 1}' FROM generate_series(1, 100) AS i`); err != nil {
		t.Fatal(err)
	}
	runUntilFinished(ctx, t, db.Pool, env)
	var processed int
	var dead, retried string
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'processed'),
		coalesce(string_agg(event_id || ' ' || last_error, ',') FILTER (WHERE status = 'dead'), ''),
		coalesce(string_agg(event_id || ' ' || attempts, ',') FILTER (WHERE attempts > 1), '') FROM inbox`).Scan(&processed, &dead, &retried); err != nil {
		t.Fatal(err)
	}
	if processed != 99 || dead != "ev-7 http batch: unknown customer" || retried != "ev-9 2" {
		t.Errorf("%d processed, dead %q, retried %q; want 99, ev-7 with its reason, ev-9 twice", processed, dead, retried)
	}
	mu.Lock()
	defer mu.Unlock()
	if most > 40 || most < 2 || posts >= 100 {
		t.Errorf("%d POSTs of at most %d rows for 100 rows: want batches of 2 to 40", posts, most)
	}
}
