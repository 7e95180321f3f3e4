package kafka

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/twmb/franz-go/pkg/kgo"
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
	cfg.BatchSize = ingest.DefaultBatchSize
	cfg.BatchTimeout = ingest.DefaultBatchTimeout
	cfg.Mapping.MaxPayload = ingest.DefaultMaxPayload

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
