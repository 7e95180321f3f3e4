package faultsuite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Scenario (reliability report, item 4): big headers instead of big
// payloads. 400 Kafka messages with tiny payloads and ~1 MB of headers each
// took the daemon to 747 MiB peak RSS (3.07 GB with
// INBOXD_INGEST_BATCH_TIMEOUT=10s), and 450 rows inserted by SQL with ~1 MB
// of headers each took its workers to 688 MB while inboxd_worker_held_bytes
// read 0: only payloads were counted. Now every such message is a rejected
// row (its headers over INBOXD_MAX_HEADERS, not stored), its offset
// committed, and the small messages between them are processed; the rows
// inserted by SQL are processed, the held-bytes gauge counting their
// headers; peak RSS stays under the 512 MiB the manifest gives.
func TestBigHeadersBoundedMemory(t *testing.T) {
	scenario(t, alone)
	db := sharedDB(t)
	sink := NewSink(t)
	lease := 30 * time.Second
	kafka := NewKafka(t, "heads", KafkaOptions{Partitions: 4, MaxMessageBytes: 4 << 20})
	routes := writeRoutes(t, httpRoute(sink, "blob"))
	env := append(baseEnv(db.URL, lease, 64, "INBOXD_ROUTES="+routes, "INBOXD_INGEST_BATCH_TIMEOUT=10s"),
		kafka.DaemonEnv("heads")...)
	d := StartDaemon(t, DaemonSpec{Name: "a", Binary: bins.InboxdNoRace, Env: env})
	const limit = 512 << 20
	var peak int64
	sample := func() {
		if v, err := d.PeakRSS(); err == nil {
			peak = max(peak, v)
		}
	}
	// ~1 MB of header per message: hex of random bytes, stamped with the
	// message's index so no two are alike.
	block := make([]byte, 500_000)
	_, _ = rand.Read(block)
	trace := hex.EncodeToString(block)
	stamp := func(i int) []byte { return []byte(strconv.Itoa(i) + trace) }

	// Kafka: big-header messages, each followed by a small one.
	n := pick(400, 400)
	ctx, cancel := context.WithTimeout(context.Background(), scale(5*time.Minute))
	defer cancel()
	for i := range n {
		big := Record(fmt.Sprintf("big-%04d", i), "blob", []byte("v"))
		big.Headers = append(big.Headers, kgo.RecordHeader{Key: "trace", Value: stamp(i)})
		big.Partition = int32(i % 4)
		small := Record(fmt.Sprintf("small-%04d", i), "blob", []byte("v"))
		if err := kafka.Client.ProduceSync(ctx, big, small).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		sample()
	}
	count := func(q string) int {
		var c int
		_ = db.Pool.QueryRow(context.Background(), q).Scan(&c)
		return c
	}
	rejected := func() int {
		return count(`SELECT count(*) FROM inbox WHERE status = 'rejected' AND event_id NOT LIKE 'small-%'`)
	}
	small := func() int {
		return count(`SELECT count(*) FROM inbox WHERE status = 'processed' AND event_id LIKE 'small-%'`)
	}
	if !waitCond(scale(3*time.Minute), 50*time.Millisecond, func() bool {
		sample()
		return rejected() == n && small() == n
	}) {
		t.Fatalf("timed out: %d of %d big-header messages rejected, %d of %d small ones processed; peak RSS %d MiB (daemon running: %t)",
			rejected(), n, small(), n, peak>>20, d.Running())
	}
	var reason string
	var stored int
	_ = db.Pool.QueryRow(context.Background(), `SELECT min(last_error), max(octet_length(headers::text)) FROM inbox WHERE status = 'rejected'`).
		Scan(&reason, &stored)
	if !strings.Contains(reason, "exceed INBOXD_MAX_HEADERS (65536)") || stored > 2 {
		t.Errorf("rejected rows: last_error %q, up to %d bytes of headers stored", reason, stored)
	}
	kafkaPeak := peak

	// SQL: rows with ~1 MB of headers, processed by the workers.
	m := pick(300, 450)
	if _, err := db.Pool.Exec(context.Background(), `
		INSERT INTO inbox (source, event_id, event_type, payload, headers)
		SELECT 'sql', 'h-' || g, 'blob', '\x76'::bytea, jsonb_build_object('trace', g::text || $1::text)
		FROM generate_series(1, $2::int) AS g`, trace, m); err != nil {
		t.Fatal(err)
	}
	var held float64
	WaitFor(t, scale(3*time.Minute), "every row of big headers processed", func() bool {
		sample()
		if mm, err := d.Metrics(); err == nil {
			held = max(held, mm.Value("inboxd_worker_held_bytes"))
		}
		return count(`SELECT count(*) FROM inbox WHERE source = 'sql' AND status = 'processed'`) == m
	})
	sample()
	if !d.Running() {
		t.Errorf("the daemon died: %s", d.ExitDescription())
	}
	t.Logf("messages=%d sql_rows=%d headers=%dB peak_rss=%dMiB (after Kafka: %dMiB) max_held_bytes=%.0f limit=%dMiB",
		n, m, len(trace), peak>>20, kafkaPeak>>20, held, limit>>20)
	if held < 1e6 {
		t.Errorf("inboxd_worker_held_bytes never exceeded %.0f while rows of 1 MB of headers were held", held)
	}
	if peak > limit {
		t.Errorf("MEMORY: peak RSS %d MiB with ~1 MB of headers per message, limit %d MiB", peak>>20, limit>>20)
	}
}
