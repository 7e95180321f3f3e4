package inboxd_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// TestMain gives the Examples their database: a migrated database of
// their own, named by DATABASE_URL as a service's configuration would name
// its database, dropped at the end. Tests take their own (pgtest.New).
// No goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(withExampleDB{m}) }

// withExampleDB runs the tests and Examples of m with DATABASE_URL set.
type withExampleDB struct{ m *testing.M }

func (w withExampleDB) Run() int {
	db, drop, err := pgtest.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.Setenv("DATABASE_URL", db.URL); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := w.m.Run()
	if err := drop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}
