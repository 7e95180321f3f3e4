// Package faultsuite is inboxd's fault-injection suite: a harness that runs
// the real daemon (built with -race) against real PostgreSQL and an
// in-process Kafka-protocol cluster, injects faults (SIGKILL, SIGSTOP,
// SIGTERM and SIGHUP, PostgreSQL stops and restarts, cut, slowed and
// black-holed database connections, slow handlers, oversized payloads,
// hostile rows), and then checks invariants on the recorded history:
//
//   - nothing lost: every event acknowledged by Kafka or inserted by SQL
//     ends processed (CheckLost);
//   - transactional effects once: the effects table written by the
//     embedder's TxHandler holds at most one row per event (CheckTxDuplicates);
//   - external duplicates bounded: 2xx deliveries to the HTTP sink beyond the
//     first per Idempotency-Key stay within the sum over faults of
//     in-flight + rate × window (CheckExternalDuplicates, Ledger);
//   - leases recover: after the last fault, within one lease plus one rescue
//     interval, no row is left processing with an expired lease
//     (CheckLeasesRecovered).
//
// The pieces:
//
//   - Binaries builds cmd/inboxd and the embedding program (./embedder, the
//     daemon run through app.Main with Go handlers) once per test binary.
//   - Daemon runs one process: start with environment, wait for /readyz,
//     SIGKILL, SIGSTOP/SIGCONT, SIGTERM with a measured exit time, metrics
//     scraping, peak RSS, captured logs (printed when a test fails).
//   - Cluster is a throwaway PostgreSQL cluster (initdb/pg_ctl as the
//     postgres OS user) for scenarios that stop or restart PostgreSQL;
//     the others use the shared server with a per-test database
//     (internal/pgtest).
//   - Proxy is an in-process TCP proxy (internal/netfault) between
//     daemons and PostgreSQL: latency, cutting every connection, black hole.
//   - Kafka is a kfake cluster with a paced Producer that records what the
//     cluster acknowledged; Sink is the HTTP service behind the daemon.
//   - RabbitMQ and NATS are a queue and a JetStream stream of the scenario's
//     own on the real servers (Broker); PublishStream publishes a paced
//     mixed stream and records what the broker confirmed.
//   - Summary prints one line per scenario: events, faults, lost,
//     transactional duplicates, external duplicates against their bound,
//     duration.
//
// The scenarios are the Test functions of this package. They run only when
// INBOXD_FAULT=1 (make fault) or INBOXD_FAULT_LONG=1 (make fault-long, the
// longer variant of every scenario); otherwise they are skipped, so
// `go test ./...` stays as fast as before.
package faultsuite
