package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testkit"
)

// -run history writes history/results.json: both scenarios with their
// pairs, the entries each wrote (none on the happy path; on the failing
// path two per failing row: its failure and its end), and the claim timed
// both ways.
func TestHistoryRun(t *testing.T) {
	if testing.Short() {
		testkit.Unavailable(t, "-short: TestHistoryRun runs the benchmark against PostgreSQL")
	}
	dir := t.TempDir()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := []string{"-run", "history", "-history-events", "2000", "-history-rounds", "2", "-history-claims", "5", "-out", dir}
	if err := run(ctx, args, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, w := range []string{"happy path", "10 % failing once", "median of 2 pairs", "claim of 500 rows"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "history", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res HistoryResults
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Scenarios) != 2 || res.Claim.WithMS <= 0 || res.Claim.WithoutMS <= 0 {
		t.Fatalf("results: %s", b)
	}
	for i, want := range []int64{0, 2 * 2000 / 10} {
		sc := res.Scenarios[i]
		if len(sc.Pairs) != 2 || sc.RateRatio <= 0 || sc.PostgresCPURatio <= 0 {
			t.Errorf("%s: %+v", sc.Name, sc)
		}
		for _, p := range sc.Pairs {
			if p.With.Entries != want || p.Without.Entries != 0 {
				t.Errorf("%s: %d entries with the history, %d without; want %d and 0", sc.Name, p.With.Entries, p.Without.Entries, want)
			}
		}
	}
}
