package maintenance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bundle is what setup gives a test: its own database.
type bundle struct{ db *pgtest.DB }

func setup(t *testing.T) *bundle {
	t.Helper()
	return &bundle{db: pgtest.New(t)}
}

// count is the number of inbox rows where cond holds (with args).
func (b *bundle) count(t *testing.T, cond string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM inbox WHERE `+cond, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// rowState is a row's status, attempts and due time.
type rowState struct {
	Status      string
	Attempts    int
	AvailableAt time.Time
}

func (b *bundle) row(t *testing.T, eventID string) rowState {
	t.Helper()
	var r rowState
	if err := b.db.Pool.QueryRow(context.Background(),
		`SELECT status, attempts, available_at FROM inbox WHERE source = 'test' AND event_id = $1`, eventID).
		Scan(&r.Status, &r.Attempts, &r.AvailableAt); err != nil {
		t.Fatalf("read row %s: %v", eventID, err)
	}
	return r
}

// insertKeyed adds rows of typ for keys keys, events rows a key, their
// event ids k<key>:<seq>.
func (b *bundle) insertKeyed(t *testing.T, typ string, keys, events int) {
	t.Helper()
	for seq := range events {
		for k := range keys {
			if _, err := b.db.Pool.Exec(context.Background(), `INSERT INTO inbox (source, event_id, event_type, key) VALUES ('test', $1, $2, $3)`,
				fmt.Sprintf("k%04d:%03d", k, seq), typ, []byte(fmt.Sprintf("k%04d", k))); err != nil {
				t.Fatal(err)
			}
		}
	}
}

var waitFor = testkit.WaitFor

func testLogger(t testing.TB) zerolog.Logger {
	if testing.Verbose() {
		return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	}
	return zerolog.Nop()
}
