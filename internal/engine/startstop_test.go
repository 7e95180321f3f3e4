package engine

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/startstop"
	"github.com/inboxd/inboxd/internal/startstop/startstoptest"
	"github.com/inboxd/inboxd/worker"
)

// The pool and its components with goroutines of their own keep the
// start/stop contract (startstoptest.Contract): the claimer, the
// completer, the leaser and the listener on a database that never answers
// (their statements fail, which says nothing of how they start and stop),
// the pool on the test's database. The executor is not a service: its
// goroutines belong to the jobs they run.
func TestStartStopContract(t *testing.T) {
	t.Parallel()
	b := setup(t)
	components := map[string]func(p *Pool) startstop.Service{
		"claimer": func(p *Pool) startstop.Service {
			p.claimer.claimDB, p.claimer.stopCtx, p.claimer.work = p.db, context.Background(), context.Background()
			return p.claimer
		},
		"completer": func(p *Pool) startstop.Service { return p.completer },
		"leaser": func(p *Pool) startstop.Service {
			p.leaser.markDB = p.db
			return p.leaser
		},
		"listener": func(p *Pool) startstop.Service { return p.listener },
	}
	for name, service := range components {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			startstoptest.Contract(t, func(t *testing.T) startstop.Service {
				return service(unitPool(t, handlers.NewRegistry(), worker.Config{}))
			})
		})
	}
	t.Run("pool", func(t *testing.T) {
		t.Parallel()
		startstoptest.Contract(t, func(t *testing.T) startstop.Service {
			p, err := New(b.db.Pool, b.reg, testConfig(), testLogger(t), prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			return p
		})
	})
}
