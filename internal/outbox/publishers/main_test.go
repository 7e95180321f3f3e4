package publishers

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// Every relay and publisher a test starts is stopped by its end: no
// goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testConfig is the relay's configuration in these tests: quick polls and
// a short lease.
func testConfig() outbox.Config {
	return outbox.Config{PollInterval: 5 * time.Millisecond, Lease: 3 * time.Second, StatsInterval: 50 * time.Millisecond,
		RetentionInterval: time.Hour}
}

// startRelay runs a relay on db with pubs until the test ends.
func startRelay(t *testing.T, db *pgtest.DB, cfg outbox.Config, pubs map[string]outbox.Publisher) *outbox.Relay {
	t.Helper()
	return runTunedRelay(t, db, cfg, pubs, zerolog.Nop(), func(*outbox.Relay) {})
}

// count is how many outbox rows match where.
func count(t *testing.T, db *pgtest.DB, where string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
