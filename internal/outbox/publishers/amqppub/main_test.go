package amqppub

import (
	"testing"

	"go.uber.org/goleak"
)

// Every relay and publisher a test starts is stopped by its end: no
// goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
