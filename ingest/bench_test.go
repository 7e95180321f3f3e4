package ingest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inboxd/inboxd/internal/testkit"
)

// BenchmarkIngest measures Kafka-to-inbox throughput with the default batch
// settings: INBOXD_BENCH_EVENTS events (default 100 000; `make bench` runs
// one iteration) are produced to an in-process kfake cluster first, then one
// consumer ingests them into PostgreSQL. kfake is slower than a real broker,
// so this is a floor, not a ceiling.
func BenchmarkIngest(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("INBOXD_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	b.StopTimer()
	var total time.Duration
	for range b.N {
		total += ingestOnce(b, n)
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}

func ingestOnce(b *testing.B, n int) time.Duration {
	const partitions = 4
	k := setupKafka(b, partitions)
	payload := []byte(`{"order_id":12345,"customer":"c-987","amount":"42.00","currency":"EUR","items":[1,2,3]}`)
	for sent := 0; sent < n; {
		var recs []*kgo.Record
		for i := 0; i < 5000 && sent < n; i++ {
			recs = append(recs, k.event(int32(sent%partitions), fmt.Sprintf("ev-%d", sent), "order.created", payload))
			sent++
		}
		k.produce(b, recs...)
	}
	cfg := k.config()
	cfg.BatchSize = DefaultBatchSize
	cfg.BatchTimeout = DefaultBatchTimeout
	cfg.Mapping.MaxPayload = DefaultMaxPayload

	b.StartTimer()
	start := time.Now()
	r := k.start(b, cfg, "bench")
	k.waitCommitted(b, 5*time.Minute)
	elapsed := time.Since(start)
	b.StopTimer()
	if err := r.stop(); err != nil {
		b.Fatal(err)
	}
	if got := k.countRows(b, "inbox"); got != n {
		b.Fatalf("%d rows, want %d", got, n)
	}
	return elapsed
}

// BenchmarkIngestAMQP measures RabbitMQ-to-inbox throughput on the local
// server with the default batch settings: INBOXD_BENCH_EVENTS events are
// published to a queue of the benchmark's own first (the broker's publish
// rate, with confirms, is reported as the ceiling), then one source ingests
// them into PostgreSQL. INBOXD_BENCH_PREFETCH sets the prefetch (default:
// AMQPConfig's, bounded in bytes: with 1 MiB payloads accepted it is about
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
	s, err := openAMQP(AMQPConfig{URL: testkit.AMQPURL(), Queues: []string{q.queue}, Prefetch: pf}, q.db.Pool, zerolog.Nop(), prometheus.NewRegistry())
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

// BenchmarkWebhookReplayWindow measures what replay_window costs a
// request: signed github deliveries, each a new body, POSTed by 16
// concurrent senders to the real listener of a source without a window and
// of one with (its one statement per request, sql/webhook_replay.sql).
// ns/op is the time per request over all senders; compare the two.
func BenchmarkWebhookReplayWindow(b *testing.B) {
	for _, window := range []time.Duration{0, time.Hour} {
		b.Run("window="+window.String(), func(b *testing.B) {
			wb := setupWebhook(b, nil, func(c *WebhookConfig) {
				c.Sources = []WebhookSourceConfig{{Name: "g", Verify: WebhookGitHub, Secrets: []string{githubSecret},
					EventID: WebhookField{Header: "X-GitHub-Delivery"}, UnsignedID: true, UnsignedType: true, ReplayWindow: window}}
			})
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var n atomic.Int64
			b.SetParallelism(8) // 16 senders on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					body := fmt.Appendf(nil, `{"n":%d,"padding":"%0200d"}`, i, 0)
					req, _ := http.NewRequest(http.MethodPost, wb.base+"g", bytes.NewReader(body))
					req.Header.Set("X-Hub-Signature-256", "sha256="+signHex(githubSecret, body))
					req.Header.Set("X-GitHub-Delivery", "d-"+strconv.FormatInt(i, 10))
					req.Header.Set("X-GitHub-Event", "push")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Errorf("answer %d", resp.StatusCode)
						return
					}
				}
			})
			b.StopTimer()
			client.CloseIdleConnections()
		})
	}
}
