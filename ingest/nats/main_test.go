package nats

import (
	"testing"

	"github.com/inboxd/inboxd/internal/ingestcore/ingesttest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The helpers the sources' tests share, by the names the tests use.
var (
	startSource = ingesttest.StartSource
)
