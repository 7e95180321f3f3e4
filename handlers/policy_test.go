package handlers

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// A route's max_attempts and concurrency take the bounds the engine and
// INBOXD_MAX_ATTEMPTS / INBOXD_WORKERS take (MaxAttemptsLimit,
// MaxConcurrency); 0 leaves the engine's default.
func TestPolicyBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		p    Policy
		want string // "" when valid
	}{
		{Policy{}, ""},
		{Policy{MaxAttempts: 1, Concurrency: 1}, ""},
		{Policy{MaxAttempts: MaxAttemptsLimit, Concurrency: MaxConcurrency}, ""},
		{Policy{MaxAttempts: MaxAttemptsLimit + 1}, fmt.Sprintf("max_attempts: must be between 1 and %d, got %d", MaxAttemptsLimit, MaxAttemptsLimit+1)},
		{Policy{MaxAttempts: -1}, "max_attempts: must be between 1 and"},
		{Policy{BackoffBase: MinBackoff}, ""},
		{Policy{BackoffBase: MinBackoff - 1}, "backoff_base: must be at least 1ms"},
		{Policy{BackoffBase: -1}, "backoff_base: must be at least 1ms"},
		{Policy{Concurrency: MaxConcurrency + 1}, fmt.Sprintf("concurrency: must be between 1 and %d, got %d", MaxConcurrency, MaxConcurrency+1)},
	} {
		errs := strings.Join(tt.p.validate(), "\n")
		switch {
		case tt.want == "" && errs != "":
			t.Errorf("%+v: %s", tt.p, errs)
		case tt.want != "" && !strings.Contains(errs, tt.want):
			t.Errorf("%+v: errors %q, want %q", tt.p, errs, tt.want)
		}
	}
}

// RateLimit and CircuitBreaker set the policy's rate, burst and breaker;
// values out of range are refused when the route is registered.
func TestRateLimitAndBreakerOptions(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	if err := reg.Handle("a", Ignore(), RateLimit(50, 5), CircuitBreaker(3, time.Second)); err != nil {
		t.Fatal(err)
	}
	if p := reg.Lookup("a").Policy; p.Rate != 50 || p.Burst != 5 || p.Breaker != (Breaker{Failures: 3, CoolDown: time.Second}) {
		t.Errorf("policy = %+v", p)
	}
	for name, opt := range map[string]Option{
		"negative rate":          RateLimit(-1, 0),
		"burst without rate":     RateLimit(0, 5),
		"breaker without a cool": CircuitBreaker(3, 0),
		"cool-down alone":        func(p *Policy) { p.Breaker.CoolDown = time.Second },
		"rate too high":          RateLimit(MaxRate+1, 0),
	} {
		if err := reg.Handle("b", Ignore(), opt); err == nil {
			t.Errorf("%s: registered", name)
		}
	}
}
