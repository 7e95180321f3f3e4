package outbox

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/startstop/startstoptest"
)

// The relay keeps the start/stop contract (startstoptest.Contract), on a
// database that never answers: its lease rounds fail, which says nothing
// of how it starts and stops.
func TestStartStopContract(t *testing.T) {
	t.Parallel()
	db, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	startstoptest.Contract(t, func(t *testing.T) startstop.Service {
		r, err := New(db, map[string]Publisher{KindKafka: &recorder{kind: KindKafka}}, testConfig(), zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}
