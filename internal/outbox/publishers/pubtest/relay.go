package pubtest

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/pgtest"
)

// RelayConfig is the relay's configuration in these tests: quick polls and
// a short lease.
func RelayConfig() outbox.Config {
	return outbox.Config{PollInterval: 5 * time.Millisecond, Lease: 3 * time.Second, StatsInterval: 50 * time.Millisecond,
		RetentionInterval: time.Hour}
}

// StartRelay runs a relay on db with pubs until the test ends.
func StartRelay(t *testing.T, db *pgtest.DB, cfg outbox.Config, pubs map[string]outbox.Publisher) *outbox.Relay {
	t.Helper()
	return RunTunedRelay(t, db, cfg, pubs, zerolog.Nop(), func(*outbox.Relay) {})
}

// Count is how many outbox rows match where.
func Count(t *testing.T, db *pgtest.DB, where string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
