package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
)

// An http batch route POSTs its rows as one JSON array, each element with
// its id, source, idempotency key, type, key, headers and payload (JSON
// as is, anything else in base64); a plain 2xx processes every row, a
// 2xx with results gives rows their own outcomes, and any other answer is
// the whole batch's.
func TestHTTPBatch(t *testing.T) {
	t.Parallel()
	type element struct {
		ID             string            `json:"id"`
		Source         string            `json:"source"`
		IdempotencyKey string            `json:"idempotency_key"`
		Type           string            `json:"type"`
		Key            *string           `json:"key"`
		Headers        map[string]string `json:"headers"`
		Attempt        int               `json:"attempt"`
		Payload        json.RawMessage   `json:"payload"`
		PayloadBase64  []byte            `json:"payload_base64"`
	}
	var got []element
	var size string
	answer := func(w http.ResponseWriter) {}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = nil
		if err := json.Unmarshal(body, &got); err != nil || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("body %q (%s): %v", body, r.Header.Get("Content-Type"), err)
		}
		size = r.Header.Get(handlers.HeaderBatchSize)
		answer(w)
	}))
	defer srv.Close()
	reg, err := handlers.NewRegistryFromRoutes(&handlers.Routes{Routes: []handlers.RouteConfig{
		{Type: "order.created", Handler: "http", URL: srv.URL, Timeout: 5 * time.Second, Batch: handlers.Batch{MaxRows: 10}},
	}}, handlers.RegisterOptions{MaxRetryAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := batchOf(reg.Lookup("order.created"))
	evs := []*handlers.Event{
		{Source: "orders", EventID: "e1", EventType: "order.created", Key: []byte("o-1"), Payload: []byte(`{"n":1}`),
			Headers: map[string]string{"trace": "x"}, Attempt: 1},
		{Source: "orders", EventID: "e2", EventType: "order.created", Payload: []byte{0xff, 0}, Attempt: 2},
		{Source: "orders", EventID: "e3", EventType: "order.created", Payload: []byte(`[]`), Attempt: 1},
	}
	ctx := context.Background()
	if err := h(ctx, evs); err != nil {
		t.Fatalf("plain 200: %v", err)
	}
	if len(got) != 3 || size != "3" {
		t.Fatalf("%d elements, %s header %q", len(got), handlers.HeaderBatchSize, size)
	}
	if e := got[0]; e.ID != "e1" || e.Source != "orders" || e.IdempotencyKey != "orders/e1" || e.Type != "order.created" ||
		e.Key == nil || *e.Key != "o-1" || e.Headers["trace"] != "x" || string(e.Payload) != `{"n":1}` || e.Attempt != 1 {
		t.Errorf("element 1: %+v", e)
	}
	if e := got[1]; e.Key != nil || e.Payload != nil || string(e.PayloadBase64) != "\xff\x00" || e.Attempt != 2 {
		t.Errorf("element 2 (binary payload, no key): %+v", e)
	}

	answer = func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results": [{"id": "e2", "status": "dead", "error": "unknown customer"},
			{"id": "e3", "status": "retry", "error": "busy", "retry_after": 30}, {"id": "e1", "status": "processed"}]}`)
	}
	err = h(ctx, evs)
	var rows handlers.RowErrors
	if !errors.As(err, &rows) || len(rows) != 3 {
		t.Fatalf("per-row results: %v", err)
	}
	if rows[0] != nil {
		t.Errorf("e1: %v, want processed", rows[0])
	}
	if !handlers.IsPermanent(rows[1]) {
		t.Errorf("e2: %v, want dead", rows[1])
	}
	if d, ok := handlers.RetryDelay(rows[2]); !ok || d != 30*time.Second || handlers.IsPermanent(rows[2]) {
		t.Errorf("e3: %v (delay %s), want retried after 30s", rows[2], d)
	}

	answer = func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) }
	err = h(ctx, evs)
	if err == nil || errors.As(err, &rows) || handlers.IsPermanent(err) {
		t.Errorf("503: %v, want one retryable error for the whole batch", err)
	}
	answer = func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadRequest) }
	if err := h(ctx, evs); !handlers.IsPermanent(err) {
		t.Errorf("400: %v, want permanent for the whole batch", err)
	}
}

// batchOf calls route's plain batch handler (given no transaction).
func batchOf(route handlers.Route) func(context.Context, []*handlers.Event) error {
	return func(ctx context.Context, evs []*handlers.Event) error {
		return route.Batch.HandleBatchTx(ctx, nil, evs)
	}
}
