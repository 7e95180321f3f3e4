package ingestcore

import (
	"context"
	"errors"
	"fmt"
	"time"

	sourceapi "github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/internal/handoff"
)

// Runner is what every source type answers.
type Runner interface {
	Run(ctx context.Context) error
	Ready() bool
	Reachable() bool
	LastProgress() time.Time
}

// Opened is a source opened: the source.Running of every kind, with its
// errors' label, its readiness probe's answer and its liveness check.
type Opened struct {
	R Runner
	// Healthy is its liveness check (nil: always healthy).
	HealthyFunc func() error
	// Label prefixes its Run's errors.
	Label string
	// Unready is the readiness probe's answer while it is not ready.
	Unready string
}

func (r Opened) Run(ctx context.Context) error {
	if err := r.R.Run(ctx); err != nil {
		return fmt.Errorf("%s: %w", r.Label, err)
	}
	return nil
}

func (r Opened) Ready() error {
	if r.R.Ready() {
		return nil
	}
	return errors.New(r.Unready)
}

func (r Opened) Reachable() bool         { return r.R.Reachable() }
func (r Opened) LastProgress() time.Time { return r.R.LastProgress() }

func (r Opened) Healthy() error {
	if r.HealthyFunc == nil {
		return nil
	}
	return r.HealthyFunc()
}

// Addr is the address the source listens on, for a webhook source once it
// listens ("" before, and for the other kinds): reached by a type
// assertion on the source.Running, as the tests that post to it do.
func (r Opened) Addr() string {
	if a, ok := r.R.(interface{ Addr() string }); ok {
		return a.Addr()
	}
	return ""
}

// HandOffOf is env's hand-off, when it is the engine's (nil otherwise).
func HandOffOf(env sourceapi.Env) handoff.HandOff {
	h, _ := env.HandOff.(handoff.HandOff)
	return h
}
