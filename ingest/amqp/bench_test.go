package amqp

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/testkit"
)

// BenchmarkIngestAMQP measures RabbitMQ-to-inbox throughput on the local
// server with the default batch settings: INBOXD_BENCH_EVENTS events are
// published to a queue of the benchmark's own first (the broker's publish
// rate, with confirms, is reported as the ceiling), then one source ingests
// them into PostgreSQL. INBOXD_BENCH_PREFETCH sets the prefetch (default:
// Config's, bounded in bytes: with 1 MiB payloads accepted it is about
// 60, which caps batches and so throughput; small messages ingest about
// three times faster with a prefetch of 1000).
func BenchmarkIngestAMQP(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("INBOXD_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	b.StopTimer()
	var total, published time.Duration
	for range b.N {
		p, d := ingestAMQPOnce(b, n)
		published += p
		total += d
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
	b.ReportMetric(float64(n*b.N)/published.Seconds(), "published/s")
}

func ingestAMQPOnce(b *testing.B, n int) (publish, ingest time.Duration) {
	q := setupAMQP(b)
	payload := []byte(`{"order_id":12345,"customer":"c-987","amount":"42.00","currency":"EUR","items":[1,2,3]}`)
	ctx := context.Background()
	start := time.Now()
	confirms := make([]*amqp.DeferredConfirmation, 0, n)
	for i := range n {
		dc, err := q.ch.PublishWithDeferredConfirmWithContext(ctx, "", q.queue, true, false,
			amqp.Publishing{MessageId: fmt.Sprintf("ev-%d", i), Type: "order.created", Body: payload, DeliveryMode: amqp.Persistent})
		if err != nil {
			b.Fatal(err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			b.Fatalf("publish not confirmed: %v", err)
		}
	}
	publish = time.Since(start)

	pf, _ := strconv.Atoi(os.Getenv("INBOXD_BENCH_PREFETCH"))
	s, err := openAMQP(Config{URL: testkit.AMQPURL(), Queues: []string{q.queue}, Prefetch: pf}, q.db.Pool, zerolog.Nop(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	start = time.Now()
	stop := startAMQP(b, s)
	waitFor(b, 5*time.Minute, func() (bool, string) {
		var rows int
		if err := q.db.Pool.QueryRow(ctx, `SELECT count(*) FROM inbox`).Scan(&rows); err != nil {
			b.Fatal(err)
		}
		return rows == n, fmt.Sprintf("%d rows of %d", rows, n)
	})
	ingest = time.Since(start)
	b.StopTimer()
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	return publish, ingest
}
