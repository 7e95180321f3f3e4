package engine

import (
	"github.com/inboxd/inboxd/internal/maintenance"
)

// newMaintenance returns p's maintenance services (internal/maintenance),
// on p's database and routes; they wake the claim loop when rows became
// due.
func newMaintenance(p *Pool) *maintenance.Services {
	return maintenance.New(p.db, p.books.routes, p.claimer.signalWake, p.cfg.Config, p.log, p.metrics.maintenance)
}
