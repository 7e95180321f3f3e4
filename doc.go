// Package inboxd runs the inbox engine inside another program: ingest from
// Kafka (when configured), the worker pool that claims rows of the inbox
// table and runs their handlers, retention, and the maintenance the pool
// does (rescuing expired leases, refreshing the inbox gauges).
//
// Everything is given as Go values: the handler registry, the database
// pools, a logger, a Prometheus registerer and the engine packages' own
// configurations. No environment variable is read; the inboxd command
// (cmd/inboxd) is one program that turns INBOXD_* variables into a Config.
//
//	ib, err := inboxd.New(inboxd.Config{
//		Registry: reg,  // *handlers.Registry with your handlers
//		DB:       db,   // *pgxpool.Pool for the engine's own statements
//		TxDB:     txdb, // *pgxpool.Pool for transactional handlers
//		Logger:   logger,
//	})
//	if err != nil {
//		return err // every problem of the Config, one per line
//	}
//	return ib.Run(ctx) // until ctx ends, Stop is called, or a part fails
//
// The stop contract follows River's client: cancelling Run's context or
// calling Stop stops claiming and ingesting and lets running handlers
// finish (within worker.Config.ShutdownTimeout); StopAndCancel cancels the
// running handlers' contexts at once. Ready and Healthy answer readiness
// and liveness probes.
package inboxd
