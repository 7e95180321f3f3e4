package outbox

import (
	"testing"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/startstop/startstoptest"
)

// The relay keeps the start/stop contract (startstoptest.Contract), on a
// database that never answers: its lease rounds fail, which says nothing
// of how it starts and stops.
func TestStartStopContract(t *testing.T) {
	t.Parallel()
	db := pgtest.Unreachable(t)
	startstoptest.Contract(t, func(t *testing.T) startstop.Service {
		r, err := New(db, map[string]Publisher{KindKafka: &recorder{kind: KindKafka}}, testConfig(), zerolog.Nop(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	})
}
