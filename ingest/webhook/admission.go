package webhook

import (
	"cmp"
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/httpserve"
)

// admission is what bounds what the webhook listener holds of requests
// before their signatures are checked (Config's BodyBudget, MinBodyRate,
// BodyGrace and BodyStall): bytes that anyone who reaches the port can
// send.
type admission struct {
	// BodyBudget is the memory, in bytes, that the bodies of the requests
	// in hand may hold at once, from their first byte read to their
	// answer (default DefaultBodyBudget). A request whose declared
	// length does not fit in what is left is answered 503 with Retry-After
	// before its body is read; one that outgrows it while it is read, the
	// same.
	BodyBudget int64
	// MinBodyRate is the slowest a body may arrive, on average, in bytes
	// per second, once it is BodyGrace behind (default
	// DefaultMinBodyRate).
	MinBodyRate int
	// BodyGrace is how far behind MinBodyRate a body may fall (default
	// DefaultBodyGrace); BodyStall is the longest a body may pause
	// between two reads (default DefaultBodyStall). A body cut by
	// either is answered 408.
	BodyGrace, BodyStall time.Duration
}

// Defaults and bounds of the admission settings (Config.BodyBudget, …).
const (
	// DefaultBodyBudget is the bodies' budget when none is given:
	// well inside the 512 MiB the Kubernetes manifest gives the daemon.
	DefaultBodyBudget = 64 << 20
	// DefaultMinBodyRate is the minimum body rate when none is
	// given.
	DefaultMinBodyRate = httpserve.DefaultMinRate
	// DefaultBodyGrace is the body's grace when none is given.
	DefaultBodyGrace = httpserve.DefaultGrace
	// DefaultBodyStall is the longest pause of a body when none is
	// given.
	DefaultBodyStall = httpserve.DefaultStall
	// BodyOverhead bounds, with the budget, the daemon's peak
	// resident memory while its webhook listener is flooded with bodies
	// that are never authenticated: peak RSS < BodyBudget +
	// BodyOverhead. It covers the process itself (about 40 MB at
	// rest), a goroutine and its buffers per open connection (the fault
	// suite floods 1,024) and the collector's slack. Measured by the fault
	// suite's TestWebhookBodyFloodBoundedMemory.
	BodyOverhead = 128 << 20
)

func (a admission) withDefaults() admission {
	a.BodyBudget = cmp.Or(a.BodyBudget, DefaultBodyBudget)
	a.MinBodyRate = cmp.Or(a.MinBodyRate, DefaultMinBodyRate)
	a.BodyGrace = cmp.Or(a.BodyGrace, DefaultBodyGrace)
	a.BodyStall = cmp.Or(a.BodyStall, DefaultBodyStall)
	return a
}

// problems lists what is wrong with a (its defaults applied) for sources
// whose largest max_body is maxBody.
func (a admission) problems(maxBody int) []string {
	var out []string
	if need := minBodyBudget(maxBody); a.BodyBudget < need {
		out = append(out, fmt.Sprintf("the webhook body budget (INBOXD_WEBHOOK_BODY_BUDGET) must be at least %d bytes, about twice the largest max_body "+
			"(a body is read in chunks, then put together), got %d", need, a.BodyBudget))
	}
	if a.MinBodyRate < 1 {
		out = append(out, fmt.Sprintf("the webhook minimum body rate (INBOXD_WEBHOOK_MIN_BODY_RATE) must be at least 1 byte per second, got %d", a.MinBodyRate))
	}
	if a.BodyGrace < 0 || a.BodyStall < 0 {
		out = append(out, "the webhook body grace and stall must not be negative")
	}
	return out
}

// minBodyBudget is the smallest budget that lets a body of maxBody bytes
// in (and the byte past it that tells a body over max_body).
func minBodyBudget(maxBody int) int64 { return bodyNeed(int64(maxBody) + 1) }

// The chunks a body is read into before it is put together.
const (
	// webhookFirstChunk is a body's first chunk: most bodies fit, and a
	// connection that trickles holds no more.
	webhookFirstChunk = 4 << 10
	// webhookChunk is each further chunk.
	webhookChunk = 64 << 10
)

// bodyRefusalReasons are the reason label's values of
// inboxd_webhook_body_refusals_total.
var bodyRefusalReasons = []string{"budget", "too_slow", "stalled", "too_long"}

// webhookMaxConns is the webhook listener's connection cap for a request
// cap of maxRequests: room for every request in hand, as many kept alive
// between requests, and as many on their way in. At the cap a new
// connection closes the one that has waited longest outside a handler
// (internal/httpserve).
func webhookMaxConns(maxRequests int) int { return 4 * maxRequests }
