package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/inboxd/inboxd/internal/testkit"
)

func TestOutboxMedian(t *testing.T) {
	rs := []Rate{{Name: "a", PerSecond: 30}, {Name: "b", PerSecond: 10}, {Name: "c", PerSecond: 20}}
	if got := outboxMedian(rs); got.Name != "c" {
		t.Errorf("median of 30, 10, 20 = %s (%v), want c (20)", got.Name, got.PerSecond)
	}
	if rs[0].Name != "a" {
		t.Errorf("outboxMedian reordered its argument: %v", rs)
	}
	if got := outboxMedian(rs[:2]); got.Name != "b" {
		t.Errorf("median of 30, 10 = %s, want the lower middle b", got.Name)
	}
}

func TestParseOutboxFlags(t *testing.T) {
	o, err := parseFlags([]string{"-run", "outbox", "-outbox-events", "2000", "-outbox-runs", "2", "-outbox-latency-seconds", "0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.parts["outbox"] || o.outboxEvents != 2000 || o.outboxRuns != 2 || o.outboxLatencySeconds != 0 || o.outboxKeys != 256 {
		t.Errorf("options = %+v", o)
	}
	for _, bad := range [][]string{{"-outbox-events", "10"}, {"-outbox-runs", "0"}, {"-outbox-keys", "0"}, {"-outbox-latency-seconds", "0.5"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

// TestOutboxRun runs the outbox measurement on a few rows against the local
// PostgreSQL: the relay's runs and the raw producer's alternate, their
// medians are the rates outbox and outbox-publish with their ratio, the
// latency run consumed every row it wrote, and the results and the chart
// are written.
func TestOutboxRun(t *testing.T) {
	if testing.Short() {
		testkit.Unavailable(t, "-short: TestOutboxRun runs the benchmark against PostgreSQL")
	}
	dir := t.TempDir()
	b, res := smallRun(t, dir, []string{"-run", "outbox", "-outbox-events", "1000", "-outbox-keys", "10", "-outbox-runs", "2",
		"-outbox-latency-seconds", "1", "-latency-load", "0.2"}, "outbox → Kafka", "relay ÷ raw producer", "p99 outbox commit→consumed at 20% load")
	if len(res.Rates) != 2 || res.Rates[0].Name != "outbox" || res.Rates[1].Name != "outbox-publish" {
		t.Fatalf("rates: %+v", res.Rates)
	}
	ob := res.Outbox
	if ob == nil || len(ob.Runs) != 4 || len(ob.PairRatios) != 2 || ob.Ratio <= 0 {
		t.Fatalf("outbox results: %s", b)
	}
	for i, r := range ob.Runs {
		if want := []string{"outbox", "outbox-publish"}[i%2]; r.Name != want || r.Events != 1000 || r.PerSecond <= 0 {
			t.Errorf("run %d: %+v, want 1000 events of %s", i, r, want)
		}
	}
	if want := res.Rates[0].PerSecond / res.Rates[1].PerSecond; ob.Ratio != want {
		t.Errorf("ratio %v, want %v", ob.Ratio, want)
	}
	if l := ob.Latency; l == nil || l.Events == 0 || l.CommitToConsumed.P99MS <= 0 || l.CreatedToPublished.P99MS <= 0 {
		t.Errorf("latency: %+v", ob.Latency)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "rates.png")); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("rates.png: %v", err)
	}
}
