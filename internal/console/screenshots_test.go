package console

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/console/browsertest"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// ScreenshotsEnv names the directory TestScreenshots writes its PNGs to
// (`make screenshots` sets it to docs/images); without it they go to a
// temporary directory, and the test only checks that the pages render in
// the browser.
const ScreenshotsEnv = "INBOXD_SCREENSHOTS"

// fakeLocal is a replica's figures for the screenshots.
type fakeLocal struct{}

func (fakeLocal) Routes() []RouteState {
	return []RouteState{
		{Route: "order.created", Running: 7, Queued: 31, Concurrency: 8},
		{Route: "order.paid", Running: 0, Queued: 0, Concurrency: 4},
		{Route: "other", Running: 1, Queued: 0, Concurrency: 2},
	}
}

func (fakeLocal) IngestLag() []PartitionLag {
	return []PartitionLag{{Topic: "orders", Partition: "0", Lag: 12}, {Topic: "orders", Partition: "1", Lag: 340}, {Topic: "payments", Partition: "0", Lag: 0}}
}

// The main pages, as an operator signed in sees them, in PNG: the
// overview, the dead rows filtered by an error text, one row and the
// dry run of a requeue.
func TestScreenshots(t *testing.T) {
	t.Parallel()
	dir := os.Getenv(ScreenshotsEnv)
	if dir == "" {
		dir = t.TempDir()
	}
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(context.Background(), `
		INSERT INTO inbox (source, event_id, event_type, status, processed_at, received_at)
		SELECT 'orders', 'p-' || g, 'order.created', 'processed',
		       now() - ((g % 3600) || ' seconds')::interval, now() - ((g % 3600) || ' seconds')::interval
		FROM generate_series(1, 6000) AS g WHERE (g % 3600) / 60 % 7 <> 3 OR g % 5 = 0;
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, updated_at, key, payload, headers, kafka_topic, kafka_partition, kafka_offset)
		SELECT 'orders', 'ord-' || (1000 + g), 'order.created', 'dead', 8,
		       'handler http: POST http://orders.internal/hooks/inbox: 503 Service Unavailable',
		       now() - ((g * 37) || ' seconds')::interval, convert_to('customer-' || (g % 9), 'UTF8'),
		       convert_to('{"order_id": ' || (1000 + g) || ', "total": "42.50", "currency": "EUR"}', 'UTF8'),
		       jsonb_build_object('event_id', 'ord-' || (1000 + g), 'event_type', 'order.created', 'traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'),
		       'orders', g % 3, 81234 + g
		FROM generate_series(1, 23) AS g;
		INSERT INTO inbox (source, event_id, event_type, status, attempts, last_error, updated_at)
		SELECT 'payments', 'pay-' || g, 'payment.captured', 'dead', 1, 'permanent: unknown currency "XTS"', now() - ((g * 90) || ' seconds')::interval
		FROM generate_series(1, 4) AS g;
		INSERT INTO inbox (source, event_id, event_type, status, last_error)
		VALUES ('orders', 'orders/1/90211', 'unknown', 'rejected', 'no event id: neither header event_id nor ce_id');
		INSERT INTO inbox (source, event_id, event_type, key, received_at)
		SELECT 'orders', 'wait-' || g, 'order.created', convert_to('customer-1', 'UTF8'), now() - interval '19 minutes'
		FROM generate_series(1, 3) AS g;
		INSERT INTO inbox (source, event_id, event_type)
		SELECT 'orders', 'new-' || g, 'order.paid' FROM generate_series(1, 57) AS g;
		INSERT INTO route_controls (route, paused, paused_by, reason, paused_at)
		VALUES ('order.paid', true, 'alice', 'payments provider maintenance until 03:00', now() - interval '12 minutes')`); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{DB: db.Pool, Token: testToken, ShowPayloads: true, StaleAfter: 5 * time.Minute, Local: fakeLocal{}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, h)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx := browsertest.Start(t)
	shot := func(name string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("%s: screenshot: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("user"), "alice"), chromedp.SendKeys(chromedp.ID("token"), testToken),
		chromedp.Click(chromedp.ID("signin")), chromedp.WaitVisible(chromedp.ID("n-dead"))); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	shot("overview", chromedp.Navigate(srv.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("n-dead")))
	shot("dead", chromedp.Navigate(srv.URL+"/ui/rows?status=dead&error=503"), chromedp.WaitVisible(chromedp.ID("rows")))
	var id string
	if err := db.Pool.QueryRow(context.Background(), "SELECT id FROM inbox WHERE event_id = 'ord-1001'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	shot("row", chromedp.Navigate(srv.URL+"/ui/rows/"+id), chromedp.WaitVisible(chromedp.ID("fields")))
	shot("dry-run", chromedp.Navigate(srv.URL+"/ui/rows?status=dead&error=503"), chromedp.WaitVisible(chromedp.ID("requeue-set")),
		chromedp.Click(chromedp.ID("requeue-set")), chromedp.WaitVisible(chromedp.ID("confirm")))
}
