package ops

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver"
)

// limitsSetup is setup with a routes file of two routes: order.created
// limited to 200/s with a breaker, order.paid with neither.
func limitsSetup(t *testing.T) (bundle, Limits) {
	b := setup(t)
	o := New(Config{DB: b.pool,
		Routes: func() ([]handlers.RouteConfig, error) {
			return []handlers.RouteConfig{
				{Type: "order.created", Rate: 200, Burst: 50, Breaker: handlers.Breaker{Failures: 5, CoolDown: time.Minute}},
				{Type: "order.paid"},
			}, nil
		},
		Breakers: func() map[string]string { return map[string]string{"order.created": "open"} }})
	return b, o.Limits()
}

// An override replaces the file's rate in List until it is
// cleared; a reset is kept with who did it; every change is audited as
// rate_change or breaker_reset, under the operator's name.
func TestSetRateClearRateAndResetBreaker(t *testing.T) {
	b, o := limitsSetup(t)
	if _, err := o.SetRate(b.ctx, alice, "order.created", 20, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := o.SetRate(b.ctx, alice, driver.DefaultRoute, 0.5, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := o.ResetBreaker(b.ctx, alice, "order.created"); err != nil {
		t.Fatal(err)
	}
	list, err := o.List(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]RouteLimit{}
	var order []string
	for _, l := range list {
		got[l.Route] = l
		order = append(order, l.Route)
	}
	if strings.Join(order, " ") != "* order.created order.paid" {
		t.Fatalf("routes %v, want * order.created order.paid", order)
	}
	c := got["order.created"]
	if c.FileRate != 200 || c.FileBurst != 50 || c.OverrideRate != 20 || c.OverrideBurst != 5 || c.OverrideBy != "alice" ||
		c.Limit() != "20/s (burst 5)" || c.Breaker.Failures != 5 || c.BreakerResetBy != "alice" || c.BreakerResetAt == nil || c.BreakerState != "open" {
		t.Errorf("order.created: %+v (%s)", c, c.Limit())
	}
	if d := got["*"]; d.Limit() != "0.5/s (burst: one second's worth)" {
		t.Errorf("the default route's limit: %s", d.Limit())
	}
	if p := got["order.paid"]; p.Limit() != "none" || p.Breaker.Failures != 0 || p.BreakerState != "" {
		t.Errorf("order.paid: %+v", p)
	}

	if _, err := o.ClearRate(b.ctx, alice, "order.created"); err != nil {
		t.Fatal(err)
	}
	if _, err := o.ClearRate(b.ctx, alice, "order.created"); !errors.Is(err, ErrNoOverride) {
		t.Fatalf("a second clear: %v, want ErrNoOverride", err)
	}
	list, _ = o.List(b.ctx)
	for _, l := range list {
		if l.Route == "order.created" && (l.OverrideRate != 0 || l.Limit() != "200/s (burst 50)") {
			t.Errorf("cleared: %+v (%s), want the file's 200/s", l, l.Limit())
		}
	}
	var line []string
	for _, e := range b.audit(t) {
		s := e.Operator + " " + e.Action + " " + e.Detail
		if e.Error != "" {
			s += " (failed)"
		}
		line = append([]string{s}, line...)
	}
	want := []string{
		"alice rate_change route order.created: rate 20/s (burst 5)",
		"alice rate_change route *: rate 0.5/s (burst: one second's worth)",
		"alice breaker_reset route order.created",
		"alice rate_change route order.created: rate override cleared",
		"alice rate_change route order.created: rate override cleared (failed)",
	}
	if strings.Join(line, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit:\n%s\nwant:\n%s", strings.Join(line, "\n"), strings.Join(want, "\n"))
	}
}

// A rate of 0 or less (or out of bounds), an unknown route, a reset of a
// route the routes file gives no breaker and an operator without a name
// are refused with a clear error, and change nothing.
func TestRateAndResetRefusals(t *testing.T) {
	b, o := limitsSetup(t)
	for _, c := range []struct {
		rate  float64
		burst int
		want  string
	}{
		{0, 0, "the rate must be more than 0 rows a second, got 0"},
		{-5, 0, "the rate must be more than 0 rows a second, got -5"},
		{math.NaN(), 0, "the rate must be more than 0 rows a second"},
		{2e6, 0, "the rate must be at most 1000000 rows a second"},
		{10, -1, "the burst must be between 1 and 1000000"},
	} {
		_, err := o.SetRate(b.ctx, alice, "order.created", c.rate, c.burst)
		if !errors.Is(err, ErrBadLimit) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rate %v burst %d: %v, want %q", c.rate, c.burst, err, c.want)
		}
	}
	if _, err := o.SetRate(b.ctx, alice, "order.nonexistent", 10, 0); !errors.Is(err, ErrUnknownRoute) {
		t.Errorf("rate of an unknown route: %v", err)
	}
	if _, err := o.ResetBreaker(b.ctx, alice, "order.nonexistent"); !errors.Is(err, ErrUnknownRoute) {
		t.Errorf("reset of an unknown route: %v", err)
	}
	if _, err := o.ResetBreaker(b.ctx, alice, "order.paid"); !errors.Is(err, ErrNoBreaker) {
		t.Errorf("reset of a route without a breaker: %v", err)
	}
	for _, op := range []Operator{{}, {Name: "unknown@vm"}} {
		if _, err := o.SetRate(b.ctx, op, "order.created", 10, 0); !errors.Is(err, ErrNoOperator) {
			t.Errorf("rate by %q: %v", op.Name, err)
		}
		if _, err := o.ResetBreaker(b.ctx, op, "order.created"); !errors.Is(err, ErrNoOperator) {
			t.Errorf("reset by %q: %v", op.Name, err)
		}
	}
	if n := len(b.audit(t)); n != 0 {
		t.Errorf("refused changes wrote %d audit entries", n)
	}
	if list, _ := driver.RouteControls(b.ctx, b.pool); len(list) != 0 {
		t.Errorf("refused changes wrote route controls: %+v", list)
	}
}
