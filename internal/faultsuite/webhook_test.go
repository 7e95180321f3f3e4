package faultsuite

import (
	"context"
	"encoding/base64"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/testkit"
)

// webhookSource is the webhook scenario's source: POST /webhooks/payments,
// and the rows' source.
const webhookSource = "payments"

// webhookEventType is the type of every event the webhook scenario sends
// (in the body's "type" field); the routes file sends it to the sink.
const webhookEventType = "payment.succeeded"

// webhookDeliveries returns n events with ids prefix + index, every tenth
// delivered a second time (the same id and body) dupLag deliveries later,
// as a sender does that did not see the first answer.
func webhookDeliveries(prefix string, n, dupLag int) []WebhookDelivery {
	ds := make([]WebhookDelivery, 0, n+n/10+1)
	var pending []WebhookDelivery // duplicates, each due dupLag events after its original
	due := map[int][]WebhookDelivery{}
	for i := range n {
		d := WebhookDelivery{ID: fmt.Sprintf("%s%06d", prefix, i), Type: webhookEventType,
			Body: fmt.Appendf(nil, `{"type":%q,"n":%d,"amount":%d}`, webhookEventType, i, 100+i%977)}
		ds = append(ds, d)
		if i%10 == 0 {
			due[i+dupLag] = append(due[i+dupLag], d)
		}
		ds = append(ds, due[i]...)
		delete(due, i)
	}
	for i := n; i < n+dupLag; i++ {
		pending = append(pending, due[i]...)
	}
	return append(ds, pending...)
}

// Scenario: webhooks through a SIGKILL storm. A sender signing every request
// per the Standard Webhooks specification delivers 3,000 events (every tenth
// twice), 16 requests in flight, retrying each after any non-2xx answer or
// connection error until it gets a 2xx; the daemon (cmd/inboxd with only
// the webhook source) is SIGKILLed three times at random points and
// restarted. Every event must be exactly one row, processed; and no event
// answered 2xx may be missing from the inbox: checked right after each
// kill for every 2xx the sender had got by then, and at the end.
func TestWebhookSIGKILLStorm(t *testing.T) {
	scenario(t, heavy)
	db := sharedDB(t)
	sink := NewSink(t)
	lease := 2 * time.Second
	run := NewRun(t, db.Pool, sink, lease)
	run.Ledger.RateSpan = 500 * time.Millisecond
	rnd := testkit.Rand(t)
	secret := NewWebhookSecret(t)
	const workers = 4
	addr := testkit.FreeAddr(t)
	routes := writeRoutes(t, httpRoute(sink, webhookEventType))
	env := baseEnv(db.URL, lease, workers, "INBOXD_ROUTES="+routes,
		"INBOXD_WEBHOOK_ADDR="+addr, "INBOXD_WEBHOOK_SOURCES="+writeWebhookSources(t, webhookSource, secret))
	start := func(name string) *Daemon {
		return StartDaemon(t, DaemonSpec{Name: name, Binary: bins.Inboxd, Env: env})
	}

	n, kills := pick(3000, 30000), pick(3, 12)
	ds := webhookDeliveries("wh-", n, 40)
	d := start("gen-0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sender := &WebhookSender{URL: "http://" + addr + "/webhooks/" + webhookSource, Secret: secret,
		Concurrency: 16, Rate: pick(300, 1000)}
	sender.Send(ctx, ds)
	run.OnFailure(sender.Describe)

	var recovered time.Time
	midStream := 0
	segment := n / (kills + 1)
	for k := range kills {
		// A random point in the middle half of the k-th of kills+1 equal
		// parts of the stream, counted in events answered 2xx (the last
		// part runs without a kill).
		target := k*segment + segment/4 + rnd.IntN(segment/2)
		WaitFor(t, scale(60*time.Second), fmt.Sprintf("%d events answered 2xx before kill %d", target, k+1),
			func() bool { return sender.AckedCount() >= target })
		f := run.Ledger.Observe(workers, d)
		if sender.Started() < len(ds) {
			midStream++
		}
		d.Kill()
		run.Ledger.Record("SIGKILL", f)
		// The process is gone: every 2xx it gave is in the sender's hands,
		// and each must be a committed row.
		acked := sender.Acked()
		if missing := missingRows(t, db.Pool, webhookSource, acked); len(missing) > 0 {
			t.Errorf("2xx WITHOUT A ROW: after kill %d, %d of the %d events answered 2xx are not in the inbox, e.g. %v",
				k+1, len(missing), len(acked), missing[:min(len(missing), 10)])
		}
		d = start(fmt.Sprintf("gen-%d", k+1))
		recovered = time.Now()
	}
	if midStream == 0 {
		t.Errorf("every kill came after the last delivery started: no kill mid-stream")
	}
	sender.Wait(t, scale(120*time.Second))
	CheckLeasesRecovered(t, db.Pool, recovered, lease)
	if u := sender.Unexpected(); len(u) > 0 {
		t.Errorf("REFUSED: correctly signed requests answered 4xx: %v", u)
	}
	acked := sender.Acked()
	if len(acked) != n {
		t.Fatalf("the sender is done but %d of %d events were answered 2xx: %s", len(acked), n, sender.Describe())
	}
	if missing := missingRows(t, db.Pool, webhookSource, acked); len(missing) > 0 {
		t.Errorf("2xx WITHOUT A ROW: %d of the %d events answered 2xx are not in the inbox, e.g. %v",
			len(missing), len(acked), missing[:min(len(missing), 10)])
	}
	run.Expect(webhookSource, acked...)
	run.WaitProcessed(scale(60 * time.Second))
	run.Check()

	// Exactly one row per event: no more rows than events, none rejected,
	// no id twice (the unique index; counted anyway).
	var rows, ids, rejected int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT event_id),
		count(*) FILTER (WHERE status = 'rejected') FROM inbox WHERE source = $1`, webhookSource).Scan(&rows, &ids, &rejected); err != nil {
		t.Fatal(err)
	}
	var others int
	_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE source <> $1`, webhookSource).Scan(&others)
	if rows != n || ids != n || rejected != 0 || others != 0 {
		t.Errorf("ROWS: %d rows of %s (%d distinct ids, %d rejected) and %d of other sources, want exactly %d: one row per event",
			rows, webhookSource, ids, rejected, others, n)
	}
	for _, id := range acked {
		if sink.Deliveries(webhookSource+"/"+id) == 0 {
			t.Errorf("NOT DELIVERED: %s/%s is processed but the sink never answered it", webhookSource, id)
			break
		}
	}

	attempts, delivered, failures := sender.Stats()
	var causes []string
	failed := 0
	for k, v := range failures {
		causes = append(causes, fmt.Sprintf("%s:%d", k, v))
		failed += v
	}
	sort.Strings(causes)
	if failed == 0 {
		t.Errorf("no attempt failed: the kills hit no request in flight")
	}
	run.Note("sent=%d dups_sent=%d attempts=%d retries=%d (%s) answered_2xx=%d kills_while_sending=%d",
		len(ds), len(ds)-n, attempts, attempts-len(ds), strings.Join(causes, ","), delivered, midStream)
	if m, err := d.Metrics(); err == nil {
		run.Note("last_gen_200s=%.0f", m.Value("inboxd_webhook_requests_total", "source", webhookSource, "code", "200"))
	}
	if exited, _, code := d.Terminate(30 * time.Second); !exited || code != 0 {
		t.Errorf("SIGTERM: exited %v, code %d", exited, code)
	}
}

// missingRows returns the ids (of source) that have no row in the inbox.
func missingRows(t testing.TB, db *pgxpool.Pool, source string, ids []string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.Query(ctx, `SELECT e.id FROM unnest($2::text[]) AS e(id)
		WHERE NOT EXISTS (SELECT 1 FROM inbox i WHERE i.source = $1 AND i.event_id = e.id) ORDER BY 1`, source, ids)
	if err != nil {
		t.Errorf("missing rows: %v", err)
		return nil
	}
	defer rows.Close()
	var missing []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Errorf("missing rows: %v", err)
			return nil
		}
		missing = append(missing, id)
	}
	if err := rows.Err(); err != nil {
		t.Errorf("missing rows: %v", err)
	}
	return missing
}

// The sender signs per the Standard Webhooks specification: its published
// test vector (runs without INBOXD_FAULT).
func TestWebhookSenderSignsTheSpecVector(t *testing.T) {
	key, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	s := WebhookSecret{Key: key, Encoded: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}
	got := s.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", []byte(`{"test": 2432232314}`))
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature %s, want %s", got, want)
	}
}
