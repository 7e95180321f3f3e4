package publishers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/syncbuf"
	"github.com/inboxd/inboxd/internal/testkit"
)

// runTunedRelay makes a relay on db with pubs and cfg, logging to log, has
// tune adjust it (its backoffs) before it runs, and runs it until the test
// ends.
func runTunedRelay(t *testing.T, db *pgtest.DB, cfg outbox.Config, pubs map[string]outbox.Publisher, log zerolog.Logger, tune func(r *outbox.Relay)) *outbox.Relay {
	t.Helper()
	r, err := outbox.New(db.Pool, pubs, cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	tune(r)
	runRelay(t, r)
	return r
}

// runRelay runs r until the test ends.
func runRelay(t *testing.T, r *outbox.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = startstop.Run(ctx, r); close(done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("relay did not stop")
		}
	})
}

// rowState is an outbox row's status, attempts and last_error, by event id.
func rowState(t *testing.T, db *pgtest.DB, eventID string) (status string, attempts int, lastErr string) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT status, attempts, coalesce(last_error, '') FROM outbox WHERE event_id = $1`, eventID).Scan(&status, &attempts, &lastErr); err != nil {
		t.Fatalf("row %s: %v", eventID, err)
	}
	return status, attempts, lastErr
}

// The reproduction: a third party's SQL writes a row whose message
// the broker's client cannot encode (a NATS header name with a space, an
// AMQP message_id over the 255 bytes of a shortstr). Each is a refusal of
// that row: its attempt is counted and it goes dead with the reason, its
// key moves on, and every other row of its destination is published; the
// RabbitMQ connection is dialled once, never again for the poison row.
func TestUnencodableRowIsRefusedNotAnOutage(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ab := setupAMQPPub(t)
	nb := setupNATSPub(t)
	amqpDest := "amqp:" + ab.exchange + "/rk"
	natsDest := "nats:" + nb.stream + ".orders"
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	long := strings.Repeat("x", 300)
	exec(`INSERT INTO outbox (destination, event_id, event_type, key, payload) VALUES
		($1, 'ok-a-1', 't', 'a', 'x'),
		($1, $2, 't', 'poison-a', 'x'),
		($1, 'after-poison-a', 't', 'poison-a', 'x'),
		($1, 'ok-a-2', 't', 'a', 'x')`, amqpDest, long)
	exec(`INSERT INTO outbox (destination, event_id, event_type, key, payload) VALUES ($1, 'ok-q-1', 't', 'q', 'x')`, natsDest)
	exec(`INSERT INTO outbox (destination, event_id, event_type, key, headers, payload)
		VALUES ($1, 'poison-n', 't', 'poison-n', '{"bad name": "v"}', 'x')`, natsDest)
	exec(`INSERT INTO outbox (destination, event_id, event_type, key, payload) VALUES
		($1, 'after-poison-n', 't', 'poison-n', 'x'),
		($1, 'ok-q-2', 't', 'q', 'x')`, natsDest)

	var logs syncbuf.Buffer
	log := zerolog.New(&logs)
	ap, err := NewAMQP(AMQPConfig{URL: testkit.AMQPURL()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ap.Close() })
	np, err := NewNATS(NATSConfig{URL: testkit.NATSURL()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = np.Close() })
	cfg := testConfig()
	cfg.MaxAttempts = 3
	runTunedRelay(t, db, cfg, map[string]outbox.Publisher{outbox.KindAMQP: ap, outbox.KindNATS: np}, log, func(r *outbox.Relay) {
		_, hold := r.Backoffs()
		r.SetBackoffs(backoff.Exponential{Base: 50 * time.Millisecond, Max: 50 * time.Millisecond}, hold)
	})

	ok := []string{"ok-a-1", "ok-a-2", "after-poison-a", "ok-q-1", "ok-q-2", "after-poison-n"}
	testkit.WaitForReport(t, 30*time.Second, func() (bool, string) {
		var states []string
		done := true
		for _, id := range ok {
			st, n, _ := rowState(t, db, id)
			states = append(states, fmt.Sprintf("%s %s/%d", id, st, n))
			done = done && st == "published"
		}
		for _, id := range []string{long, "poison-n"} {
			st, n, _ := rowState(t, db, id)
			states = append(states, fmt.Sprintf("%.10s %s/%d", id, st, n))
			done = done && st == "dead"
		}
		return done, fmt.Sprintf("the poison rows dead and every other row published: %s (RabbitMQ dialled %d times)",
			strings.Join(states, ", "), strings.Count(logs.String(), "connected to RabbitMQ"))
	})
	for id, reason := range map[string]string{long: "255", "poison-n": "bad name"} {
		_, attempts, lastErr := rowState(t, db, id)
		if attempts < 1 || !strings.Contains(lastErr, reason) {
			t.Errorf("%.10s: attempts %d, last_error %q; want an attempt counted and a reason naming %q", id, attempts, lastErr, reason)
		}
	}
	if got := ab.consume(t, 3); len(got) != 3 {
		t.Errorf("RabbitMQ holds %d messages, want 3", len(got))
	}
	if n := nb.messages(t); n != 3 {
		t.Errorf("the stream holds %d messages, want 3", n)
	}
	if n := strings.Count(logs.String(), "connected to RabbitMQ"); n != 1 {
		t.Errorf("RabbitMQ dialled %d times, want once", n)
	}
}
