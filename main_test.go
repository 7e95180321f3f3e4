package inboxd_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// TestMain gives the Examples their database (a migrated database of
// their own, named by DATABASE_URL); tests take their own (pgtest.New).
// No goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.MainWithDatabase(m, "DATABASE_URL")) }
