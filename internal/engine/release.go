package engine

import (
	"errors"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/internal/driver/status"
)

// registryRef is the pool's handler registry, replaced whole by a reload
// (Pool.SetRegistry): rows claimed from then on are handled by the new one.
type registryRef struct {
	p atomic.Pointer[handlers.Registry]
}

// load returns the registry as it is now.
func (r *registryRef) load() *handlers.Registry { return r.p.Load() }

// store replaces the registry.
func (r *registryRef) store(reg *handlers.Registry) { r.p.Store(reg) }

// typeLabel is the event_type metric label for eventType: itself when the
// registry routes it, "other" otherwise (label values stay bounded).
func (r *registryRef) typeLabel(eventType string) string {
	if r.load().Routed(eventType) {
		return eventType
	}
	return otherEventTypes
}

// releaser gives rows back to the inbox unattempted (received, due now,
// the attempt not counted), through the completer: the rows whose leases
// are at risk, those cut from a key's chain, those of a stopping pool.
type releaser struct {
	out     outcomes // the completer
	reg     *registryRef
	metrics *metrics
	log     zerolog.Logger
}

// result is the outcome that gives j back unattempted, with why in
// last_error.
func (r *releaser) result(j *job, why string) result {
	return result{
		job: j, id: j.row.ID, token: j.token, eventID: j.row.EventID, eventType: j.row.EventType,
		typeLabel: r.reg.typeLabel(j.row.EventType),
		status:    status.Received, release: true, outcome: outcomeReleased,
		lastError: errText(errors.New(why)),
	}
}

// release gives j back, with why in its last_error.
func (r *releaser) release(j *job, why string) { r.out.submit(r.result(j, why)) }

// giveBack gives jobs back, with why in their last_error (books.giver).
func (r *releaser) giveBack(jobs []*job, why string) {
	for _, j := range jobs {
		r.release(j, why)
	}
}

// atRisk gives back jobs whose leases could not be renewed in time
// (books.giver).
func (r *releaser) atRisk(jobs []*job) {
	for _, j := range jobs {
		r.metrics.leaseAtRisk.Inc()
		r.log.Warn().Int64("row_id", j.row.ID).Str("event_id", j.row.EventID).Str("event_type", j.row.EventType).
			Msg("lease not renewed in time: giving the row back unstarted")
		r.release(j, "released unstarted: its lease could not be renewed in time")
	}
}

// rowLog begins a log line of log at level about r's row.
func rowLog(log *zerolog.Logger, level zerolog.Level, r result) *zerolog.Event {
	e := log.WithLevel(level).Int64("row_id", r.id).Str("event_id", r.eventID).Str("event_type", r.eventType)
	if r.lastError != nil {
		e = e.Str("error", *r.lastError)
	}
	return e
}
