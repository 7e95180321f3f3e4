package testkit

import (
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// InCI reports whether the tests run in CI (.ci/run sets CI=true), where a
// missing prerequisite is a failure, not a reason to skip.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable ends t because a prerequisite (a tool, a service) is missing:
// it skips with msg on a developer's machine and fails with msg under
// CI=true, so no test passes in CI by skipping.
func Unavailable(t testing.TB, msg string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s (CI=true: .ci/run should have provided it)", msg)
	}
	t.Skip(msg)
}

// SeedEnv names the variable that fixes the seed of Rand, to re-run a test
// with the randomness of a failed run.
const SeedEnv = "INBOXD_TEST_SEED"

// Rand returns a random source for t, seeded from INBOXD_TEST_SEED when set
// and from the clock otherwise. It logs the seed, so a failure can be
// re-run with the same draws: INBOXD_TEST_SEED=<seed> go test -run <test>.
// The source is safe for concurrent use (handlers of a daemon under test
// draw from it at once).
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not an unsigned integer", SeedEnv, v)
		}
		seed = s
	}
	t.Logf("random seed %d (re-run with %s=%d)", seed, SeedEnv, seed)
	return rand.New(&lockedSource{src: rand.NewPCG(seed, seed>>1|1)})
}

// lockedSource makes a rand.Source safe for concurrent use.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Uint64()
}

// AMQPURL is the RabbitMQ server tests use: INBOXD_TEST_AMQP_URL, else the
// machine's local server (guest/guest on 127.0.0.1:5672).
func AMQPURL() string {
	if u := os.Getenv("INBOXD_TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// NATSURL is the NATS server (with JetStream) tests use:
// INBOXD_TEST_NATS_URL, else the machine's local server on 127.0.0.1:4222.
func NATSURL() string {
	if u := os.Getenv("INBOXD_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}
