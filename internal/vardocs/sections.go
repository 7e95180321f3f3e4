package vardocs

import (
	"fmt"
	"strings"
)

// Section is a group of variables, as `inboxd help` and
// docs/configuration.md show them: one per part of the daemon.
type Section struct {
	// Title names the part ("Kafka", "Workers").
	Title string
	// About says in one sentence what the variables configure, with where
	// to read more (a docs/ page, relative to docs/).
	About string
	// Variables are the section's, in the order of Variables.
	Variables []Variable
}

// sectionRules place each variable in its section: the first rule whose
// names match (a name ending in _ is a prefix, else the exact variable).
// The one place a variable's section is decided; a variable no rule places
// fails Sections (and so `make docs` and `inboxd help`'s test).
var sectionRules = []struct {
	title, about string
	names        []string
}{
	{"Database", "The PostgreSQL database and the daemon's sessions on it ([database roles](deployment.md#database-roles)).",
		[]string{"INBOXD_DATABASE_", "INBOXD_STATEMENT_TIMEOUT", "INBOXD_IDLE_IN_TRANSACTION_TIMEOUT", "INBOXD_MIGRATE_"}},
	{"Kafka", "The Kafka source: empty brokers, no Kafka ingest ([sources](sources.md#kafka)).", []string{"INBOXD_KAFKA_"}},
	{"RabbitMQ", "The RabbitMQ source: empty URL, no RabbitMQ ingest ([sources](sources.md#rabbitmq)).", []string{"INBOXD_AMQP_"}},
	{"NATS JetStream", "The NATS JetStream source: empty URL, no NATS ingest ([sources](sources.md#nats-jetstream)).", []string{"INBOXD_NATS_"}},
	{"Webhooks", "The signed webhook source: empty address, no listener ([webhooks](webhooks.md)).", []string{"INBOXD_WEBHOOK_"}},
	{"Every source", "How every source batches its messages and maps them to rows ([sources](sources.md#mapping-rules-shared-by-every-source)).",
		[]string{"INBOXD_INGEST_", "INBOXD_MAX_PAYLOAD", "INBOXD_MAX_HEADERS", "INBOXD_EVENT_"}},
	{"Workers", "The routes file and the pool that claims, runs, retries and dead-letters rows ([routes and handlers](routes.md)).",
		[]string{"INBOXD_ROUTES", "INBOXD_WORKERS", "INBOXD_CLAIM_", "INBOXD_PREFETCH", "INBOXD_MAX_ATTEMPTS", "INBOXD_LEASE",
			"INBOXD_BACKOFF_", "INBOXD_POLL_INTERVAL", "INBOXD_SHUTDOWN_TIMEOUT"}},
	{"Retention and statistics", "How long rows are kept, and the gauges' refresh ([operations](operations.md#retention-and-the-deduplication-window)).",
		[]string{"INBOXD_RETENTION", "INBOXD_DEAD_RETENTION", "INBOXD_RETENTION_INTERVAL", "INBOXD_STALE_AFTER", "INBOXD_STATS_INTERVAL"}},
	{"Outbox", "The outbox relay, publishing through the brokers of the sources' settings ([the outbox](outbox.md#configuration)).", []string{"INBOXD_OUTBOX", "INBOXD_OUTBOX_"}},
	{"HTTP and console", "The HTTP endpoints (/metrics, /healthz, /readyz) and the console under /ui/ ([the console](console.md)).",
		[]string{"INBOXD_HTTP_", "INBOXD_UI_", "INBOXD_OPERATOR"}},
	{"Logs", "The log lines on stderr ([getting started](getting-started.md#signals-and-logs)).", []string{"INBOXD_LOG_"}},
}

// matches reports whether variable name is one of names (a name ending
// in _ matches as a prefix).
func matches(name string, names []string) bool {
	for _, n := range names {
		if name == n || (strings.HasSuffix(n, "_") && strings.HasPrefix(name, n)) {
			return true
		}
	}
	return false
}

// Sections returns every variable of Variables in its section, the
// sections in their order and the variables of each in Variables' order.
// It fails on a variable no section takes.
func Sections() ([]Section, error) {
	out := make([]Section, len(sectionRules))
	for i, r := range sectionRules {
		out[i] = Section{Title: r.title, About: r.about}
	}
	var lost []string
	for _, v := range Variables() {
		placed := false
		for i, r := range sectionRules {
			if matches(v.Name, r.names) {
				out[i].Variables = append(out[i].Variables, v)
				placed = true
				break
			}
		}
		if !placed {
			lost = append(lost, v.Name)
		}
	}
	if len(lost) > 0 {
		return nil, fmt.Errorf("config: no section of sectionRules (config/sections.go) takes %s", strings.Join(lost, ", "))
	}
	return out, nil
}
