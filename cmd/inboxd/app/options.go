package app

import (
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/handlers"
)

// Options customises the daemon when it is run from another program's main.
// Every field is optional; the zero Options runs the daemon exactly as the
// inboxd binary does.
type Options struct {
	// Registry holds Go handlers to run beside the routes file's; nil starts
	// from an empty registry. It is copied, never changed.
	Registry *handlers.Registry

	// DB is the pool the engine's own statements use (claims, completions,
	// lease renewals, ingest, retention) instead of one opened from
	// INBOXD_DATABASE_URL; the daemon does not close it. Size it for the
	// engine alone (config.EngineConns connections): transactional
	// handlers take theirs from TxDB. When INBOXD_DATABASE_URL is unset, the
	// subcommands use DB's connection string.
	DB *pgxpool.Pool
	// TxDB is the pool transactional handlers take their connections from;
	// nil opens one from DB's (or INBOXD_DATABASE_URL's) configuration with
	// the handlers' share of INBOXD_DATABASE_MAX_CONNS. The daemon does not
	// close a pool it was given.
	TxDB *pgxpool.Pool

	// Logger receives the daemon's logs (each component adds its own
	// component field); nil logs to stderr as INBOXD_LOG_LEVEL and
	// INBOXD_LOG_FORMAT say.
	Logger *zerolog.Logger

	// Registerer receives the daemon's metrics instead of a registry of its
	// own (with the Go and process collectors). If it is also a
	// prometheus.Gatherer (a *prometheus.Registry is), /metrics serves it;
	// otherwise the caller serves its metrics itself.
	Registerer prometheus.Registerer

	// Mux, when set, gets the daemon's /metrics, /healthz and /readyz
	// handlers, and the daemon listens on nothing itself (INBOXD_HTTP_ADDR
	// is ignored): the caller serves the mux.
	Mux *http.ServeMux
}
