// Package config loads inboxd's configuration from INBOXD_* environment
// variables, applies defaults and validates it.
//
// Load is called once, in main. Every problem is reported on one line that
// names the variable at fault, for example:
//
//	INBOXD_LEASE: must be at least 100ms, got "20ms"
//
// Secrets (the database URL, the SASL password) may be given directly or
// through a *_FILE variable naming a file that holds them. They never appear in
// error messages or logs: use Config.Redacted to log the configuration.
// The variables' help (`inboxd help`, the docs' table) is internal/vardocs',
// drawn from Config's tags and Defaults.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/ingest/nats"
	"github.com/inboxd/inboxd/ingest/webhook"
	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/lease"
	"github.com/inboxd/inboxd/internal/natsurl"
	"github.com/inboxd/inboxd/internal/opfiles"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/worker"
)

// Config is the whole daemon configuration. The env tag of each field is the
// environment variable it is read from; help is the one line `inboxd help`
// shows for it (see Variables). A new field needs both, and a default:
// a setting of the engines (worker, ingest, retention) takes the engine's
// exported default (worker.DefaultLease, ingest.DefaultBatchSize, …) in
// Defaults, so that it is written once; a setting only the daemon has
// (the HTTP address, the log level, …) has its default in an envDefault tag.
type Config struct {
	// DatabaseURL is the PostgreSQL connection string (URL or key=value form).
	DatabaseURL string `env:"INBOXD_DATABASE_URL" help:"PostgreSQL connection string, URL or key=value form (required, or INBOXD_DATABASE_URL_FILE)"`
	// DatabaseURLFile names a file holding the connection string; it is used
	// when DatabaseURL is empty.
	DatabaseURLFile string `env:"INBOXD_DATABASE_URL_FILE" help:"file holding the connection string, used when INBOXD_DATABASE_URL is empty"`
	// DatabaseMaxConns caps the daemon's connections in all: EngineConns of
	// them for the engine's own statements (claims, completions, lease
	// renewals, ingest, health), the rest for transactional handlers; 0
	// means EngineConns + max(2, workers/4). The notification listener holds
	// one more.
	DatabaseMaxConns int `env:"INBOXD_DATABASE_MAX_CONNS" envDefault:"0" help:"connections in all: 8 for the engine, the rest for transactional handlers; 0 = 8 + max(2, workers/4)"`
	// StatementTimeout is set as statement_timeout on every session.
	StatementTimeout time.Duration `env:"INBOXD_STATEMENT_TIMEOUT" help:"statement_timeout of every session"`
	// IdleInTxTimeout is set as idle_in_transaction_session_timeout on every
	// session, so a stuck transaction cannot hold vacuum back.
	IdleInTxTimeout time.Duration `env:"INBOXD_IDLE_IN_TRANSACTION_TIMEOUT" envDefault:"60s" help:"idle_in_transaction_session_timeout of every session"`

	// KafkaBrokers lists the bootstrap brokers; empty runs workers only.
	KafkaBrokers []string `env:"INBOXD_KAFKA_BROKERS" envSeparator:"," help:"comma list of bootstrap brokers (host:port); empty = no ingest, workers only"`
	// KafkaTopics lists the topics to consume.
	KafkaTopics []string `env:"INBOXD_KAFKA_TOPICS" envSeparator:"," help:"comma list of topics to consume; required with brokers"`
	// KafkaGroup is the consumer group id.
	KafkaGroup string `env:"INBOXD_KAFKA_GROUP" envDefault:"inboxd" help:"consumer group"`
	// KafkaClientID is sent to the brokers to identify this daemon.
	KafkaClientID string `env:"INBOXD_KAFKA_CLIENT_ID" help:"client id sent to the brokers"`
	// KafkaStartOffset is where a group with no committed offset starts:
	// "first" or "last".
	KafkaStartOffset string `env:"INBOXD_KAFKA_START_OFFSET" envDefault:"first" help:"where a group without committed offsets starts: first or last"`
	// KafkaSessionTimeout is the group session timeout: how long the group
	// waits for a member that died without leaving.
	KafkaSessionTimeout time.Duration `env:"INBOXD_KAFKA_SESSION_TIMEOUT" help:"how long the group waits for a member that died without leaving"`
	// KafkaTLS enables TLS to the brokers.
	KafkaTLS bool `env:"INBOXD_KAFKA_TLS" envDefault:"false" help:"TLS to the brokers"`
	// KafkaTLSCAFile is a PEM bundle of CAs to trust; empty uses the system pool.
	KafkaTLSCAFile string `env:"INBOXD_KAFKA_TLS_CA_FILE" help:"PEM bundle of CAs to trust; empty = the system pool"`
	// KafkaTLSCertFile is the client certificate (PEM) for mutual TLS.
	KafkaTLSCertFile string `env:"INBOXD_KAFKA_TLS_CERT_FILE" help:"client certificate (PEM) for mutual TLS, with INBOXD_KAFKA_TLS_KEY_FILE"`
	// KafkaTLSKeyFile is the client key (PEM) for mutual TLS.
	KafkaTLSKeyFile string `env:"INBOXD_KAFKA_TLS_KEY_FILE" help:"client key (PEM) for mutual TLS"`
	// KafkaTLSServerName overrides the server name checked in the broker's
	// certificate.
	KafkaTLSServerName string `env:"INBOXD_KAFKA_TLS_SERVER_NAME" help:"server name checked in the brokers' certificates"`
	// KafkaTLSInsecureSkipVerify disables certificate verification (tests only).
	KafkaTLSInsecureSkipVerify bool `env:"INBOXD_KAFKA_TLS_INSECURE_SKIP_VERIFY" envDefault:"false" help:"skip certificate verification (tests only)"`
	// KafkaSASLMechanism is empty (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	KafkaSASLMechanism string `env:"INBOXD_KAFKA_SASL_MECHANISM" help:"empty (no SASL), PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"`
	// KafkaSASLUsername is the SASL user name.
	KafkaSASLUsername string `env:"INBOXD_KAFKA_SASL_USERNAME" help:"SASL user name"`
	// KafkaSASLPassword is the SASL password.
	KafkaSASLPassword string `env:"INBOXD_KAFKA_SASL_PASSWORD" help:"SASL password (or INBOXD_KAFKA_SASL_PASSWORD_FILE)"`
	// KafkaSASLPasswordFile names a file holding the SASL password; it is used
	// when KafkaSASLPassword is empty.
	KafkaSASLPasswordFile string `env:"INBOXD_KAFKA_SASL_PASSWORD_FILE" help:"file holding the SASL password, used when INBOXD_KAFKA_SASL_PASSWORD is empty"`

	// AMQPURL is the RabbitMQ broker's amqp:// or amqps:// URL; empty runs
	// no RabbitMQ source. Its password is never logged.
	AMQPURL string `env:"INBOXD_AMQP_URL" help:"RabbitMQ URL, amqp:// or amqps:// (or INBOXD_AMQP_URL_FILE); empty = no RabbitMQ source"`
	// AMQPURLFile names a file holding the RabbitMQ URL; it is used when
	// AMQPURL is empty.
	AMQPURLFile string `env:"INBOXD_AMQP_URL_FILE" help:"file holding the RabbitMQ URL, used when INBOXD_AMQP_URL is empty"`
	// AMQPQueues lists the RabbitMQ queues consumed; each must exist.
	AMQPQueues []string `env:"INBOXD_AMQP_QUEUES" envSeparator:"," help:"comma list of existing RabbitMQ queues to consume; required with INBOXD_AMQP_URL"`
	// AMQPPrefetch is each queue's channel QoS; 0 derives it from the batch
	// size and bytes.
	AMQPPrefetch int `env:"INBOXD_AMQP_PREFETCH" envDefault:"0" help:"deliveries RabbitMQ sends ahead of their acknowledgement, per queue; 0 = 2 x INBOXD_INGEST_BATCH_SIZE, capped to 4 x INBOXD_INGEST_BATCH_BYTES of the largest messages"`
	// AMQPTLSCAFile is a PEM bundle of CAs to trust for amqps://; empty
	// uses the system pool.
	AMQPTLSCAFile string `env:"INBOXD_AMQP_TLS_CA_FILE" help:"PEM bundle of CAs to trust for amqps://; empty = the system pool"`
	// AMQPTLSCertFile is the client certificate (PEM) for mutual TLS.
	AMQPTLSCertFile string `env:"INBOXD_AMQP_TLS_CERT_FILE" help:"client certificate (PEM) for amqps://, with INBOXD_AMQP_TLS_KEY_FILE"`
	// AMQPTLSKeyFile is the client key (PEM) for mutual TLS.
	AMQPTLSKeyFile string `env:"INBOXD_AMQP_TLS_KEY_FILE" help:"client key (PEM) for amqps://"`

	// NATSURL is the NATS server's nats:// or tls:// URL, or a comma list
	// of them (a cluster); empty runs no NATS source. A password or token
	// in it is never logged.
	NATSURL string `env:"INBOXD_NATS_URL" help:"NATS server URL, nats:// or tls://, or a comma list of them (or INBOXD_NATS_URL_FILE); empty = no NATS source"`
	// NATSURLFile names a file holding the NATS URL; it is used when
	// NATSURL is empty.
	NATSURLFile string `env:"INBOXD_NATS_URL_FILE" help:"file holding the NATS URL, used when INBOXD_NATS_URL is empty"`
	// NATSCredsFile is a NATS credentials file (user JWT and NKey seed).
	NATSCredsFile string `env:"INBOXD_NATS_CREDS_FILE" help:"NATS credentials file (user JWT and NKey seed); empty = the URL's user, if any"`
	// NATSStreams lists the JetStream streams consumed; each must exist.
	NATSStreams []string `env:"INBOXD_NATS_STREAMS" envSeparator:"," help:"comma list of existing JetStream streams to consume; required with INBOXD_NATS_URL"`
	// NATSConsumer is the durable pull consumer's name on every stream.
	NATSConsumer string `env:"INBOXD_NATS_CONSUMER" help:"durable pull consumer on each stream: bound if it exists, else created with explicit acks from the stream's first message"`
	// NATSSubjects is the subject filter of a created consumer.
	NATSSubjects []string `env:"INBOXD_NATS_SUBJECTS" envSeparator:"," help:"comma list of subjects a created consumer is filtered on; empty = every subject of the stream"`
	// NATSTLSCAFile is a PEM bundle of CAs to trust for TLS to NATS; empty
	// uses the system pool.
	NATSTLSCAFile string `env:"INBOXD_NATS_TLS_CA_FILE" help:"PEM bundle of CAs to trust for TLS to NATS (turns TLS on); empty = the system pool"`
	// NATSTLSCertFile is the client certificate (PEM) for mutual TLS.
	NATSTLSCertFile string `env:"INBOXD_NATS_TLS_CERT_FILE" help:"client certificate (PEM) for TLS to NATS, with INBOXD_NATS_TLS_KEY_FILE"`
	// NATSTLSKeyFile is the client key (PEM) for mutual TLS.
	NATSTLSKeyFile string `env:"INBOXD_NATS_TLS_KEY_FILE" help:"client key (PEM) for TLS to NATS"`

	// WebhookAddr is the webhook listener's address; empty runs no webhook
	// source.
	WebhookAddr string `env:"INBOXD_WEBHOOK_ADDR" help:"listen address of the webhook source (POST /webhooks/<name>); empty = no webhook source"`
	// WebhookSources names the webhook sources file (YAML).
	WebhookSources string `env:"INBOXD_WEBHOOK_SOURCES" help:"webhook sources file (YAML: name, verify, secret_file, event_id, event_type, key, max_body); required with INBOXD_WEBHOOK_ADDR"`
	// WebhookTLSCertFile is the webhook listener's certificate (PEM).
	WebhookTLSCertFile string `env:"INBOXD_WEBHOOK_TLS_CERT_FILE" help:"certificate (PEM) of the webhook listener, with INBOXD_WEBHOOK_TLS_KEY_FILE: serves HTTPS"`
	// WebhookTLSKeyFile is the webhook listener's key (PEM).
	WebhookTLSKeyFile string `env:"INBOXD_WEBHOOK_TLS_KEY_FILE" help:"key (PEM) of the webhook listener"`
	// WebhookWriteTimeout bounds a webhook request's wait for its batch's
	// commit; after it the request is answered 503 with Retry-After.
	WebhookWriteTimeout time.Duration `env:"INBOXD_WEBHOOK_WRITE_TIMEOUT" help:"longest a webhook request waits for the commit of its row before a 503 with Retry-After"`
	// WebhookMaxRequests caps the verified webhook requests waiting for
	// their commits at once.
	WebhookMaxRequests int `env:"INBOXD_WEBHOOK_MAX_REQUESTS" help:"verified webhook requests waiting for their commits at once; more are answered 503 with Retry-After (a request takes its place once its body is read and verified)"`
	// WebhookBodyBudget is the memory the bodies of the webhook requests
	// in hand may hold at once.
	WebhookBodyBudget int64 `env:"INBOXD_WEBHOOK_BODY_BUDGET" help:"bytes the bodies of the webhook requests in hand may hold at once, verified or not; a request whose body does not fit in what is left is answered 503 with Retry-After before its body is read (at least about twice the largest max_body)"`
	// WebhookMinBodyRate is the slowest a webhook body may arrive.
	WebhookMinBodyRate int `env:"INBOXD_WEBHOOK_MIN_BODY_RATE" help:"bytes per second a webhook body must keep up on average, after a short grace and with short pauses only (docs/webhooks.md, Budgets): a slower one is cut with a 408"`

	// IngestHandOff lets ingest hand the rows it stores to this replica's
	// idle handlers, reserved for them, with no claim (inboxd.Config.NoHandOff).
	IngestHandOff bool `env:"INBOXD_INGEST_HANDOFF" envDefault:"true" help:"hand the rows ingest stores to this replica's idle handlers at once, reserved for them, instead of waiting for a claim (rows of ordered, paused, breaker-open and rate-limited routes always wait for a claim)"`
	// IngestBatchSize closes an ingest batch when it holds this many messages.
	IngestBatchSize int `env:"INBOXD_INGEST_BATCH_SIZE" help:"messages that close an ingest batch"`
	// IngestBatchTimeout closes a non-empty ingest batch after this long.
	IngestBatchTimeout time.Duration `env:"INBOXD_INGEST_BATCH_TIMEOUT" help:"a non-empty ingest batch is written at the latest after this"`
	// IngestBatchBytes closes an ingest batch when its payloads, keys and
	// headers add up to this many bytes; it also bounds the messages the
	// Kafka reader buffers ahead (this many bytes' worth of the largest
	// messages accepted: INBOXD_MAX_PAYLOAD + INBOXD_MAX_HEADERS + the key
	// bound).
	IngestBatchBytes int `env:"INBOXD_INGEST_BATCH_BYTES" help:"bytes (payloads, keys, headers) that close an ingest batch; also bounds what the Kafka reader buffers"`
	// MaxPayload is the largest payload stored, in bytes; bigger messages
	// become rejected rows. The Kafka reader's MaxBytes is set to match.
	MaxPayload int `env:"INBOXD_MAX_PAYLOAD" help:"largest payload stored, in bytes; bigger messages become rejected rows"`
	// MaxHeaders is the most bytes of header names and values a message may
	// carry; messages with more become rejected rows, their headers not
	// stored. The Kafka reader's MaxBytes and queue count it.
	MaxHeaders int `env:"INBOXD_MAX_HEADERS" help:"most bytes of header names and values a message may carry; messages with more become rejected rows"`
	// EventIDHeaders are the headers tried, in order, for the event id.
	EventIDHeaders []string `env:"INBOXD_EVENT_ID_HEADERS" envSeparator:"," help:"headers tried, in order, for the event id"`
	// EventTypeHeaders are the headers tried, in order, for the event type.
	EventTypeHeaders []string `env:"INBOXD_EVENT_TYPE_HEADERS" envSeparator:"," help:"headers tried, in order, for the event type"`
	// EventIDJSONField, when set, is a top-level JSON field of the payload used
	// for the event id when no header carries it.
	EventIDJSONField string `env:"INBOXD_EVENT_ID_JSON_FIELD" help:"top-level JSON field of the payload used when no header carries the event id"`
	// EventTypeJSONField, when set, is a top-level JSON field of the payload
	// used for the event type when no header carries it.
	EventTypeJSONField string `env:"INBOXD_EVENT_TYPE_JSON_FIELD" help:"top-level JSON field of the payload used when no header carries the event type"`

	// Workers is the number of handlers run concurrently.
	Workers int `env:"INBOXD_WORKERS" help:"handlers run concurrently"`
	// ClaimBatch caps the rows claimed by one claim statement.
	ClaimBatch int `env:"INBOXD_CLAIM_BATCH" help:"most rows one claim statement takes"`
	// ClaimBytes caps the bytes (payloads, keys, headers) of the rows a
	// replica holds claimed and not yet handled (a row bigger than that is
	// claimed alone).
	ClaimBytes int64 `env:"INBOXD_CLAIM_BYTES" help:"bytes (payloads, keys, headers) a replica may hold claimed and not yet handled"`
	// Prefetch is how many claimed rows may wait for a free worker; 0 adapts
	// it to the handlers (see worker.Config.Prefetch), -1 none.
	Prefetch int `env:"INBOXD_PREFETCH" help:"claimed rows that may wait for a free worker; 0 = adaptive (min(claim batch, 4 x workers), growing to 250ms of a fast route's work, up to 2 x claim batch), -1 = none"`
	// MaxAttempts is the number of attempts before a row goes dead.
	MaxAttempts int `env:"INBOXD_MAX_ATTEMPTS" help:"attempts before a failing row goes dead"`
	// Lease is how long a claimed row belongs to its worker without renewal.
	// While the worker holds the row (waiting for a handler, running, its
	// outcome being written) it renews the lease once a third of it has
	// passed, looking every lease/6 (at most 1s apart): a row is lost only
	// after about two thirds of a lease without a successful renewal.
	Lease time.Duration `env:"INBOXD_LEASE" help:"how long a claimed row belongs to its worker without renewal; while the worker holds the row, the lease is renewed once a third of it has passed (checked every lease/6, at most 1s apart)"`
	// BackoffBase is the delay before the first retry; it doubles with
	// every failed attempt up to BackoffMax, and each delay is drawn
	// between half and all of it (equal jitter).
	BackoffBase time.Duration `env:"INBOXD_BACKOFF_BASE" help:"delay after the first failed attempt, doubling with each one up to INBOXD_BACKOFF_MAX; each delay is drawn between half and all of it (jitter)"`
	// BackoffMax caps the delay between retries.
	BackoffMax time.Duration `env:"INBOXD_BACKOFF_MAX" help:"cap on the retry delay (and on Retry-After)"`
	// PollInterval is the fallback polling period when no notification comes.
	PollInterval time.Duration `env:"INBOXD_POLL_INTERVAL" help:"polling fallback when no notification arrives"`
	// ShutdownTimeout is how long in-flight handlers may run after a stop
	// signal before they are cancelled and their rows released.
	ShutdownTimeout time.Duration `env:"INBOXD_SHUTDOWN_TIMEOUT" help:"how long in-flight handlers may finish after SIGTERM or SIGINT; then they are cancelled and their rows released"`
	// Retention is how long processed (and ignored) rows are kept after
	// processed_at; deduplication holds only while a row exists, so it must
	// outlast the topics' retention.
	Retention time.Duration `env:"INBOXD_RETENTION" help:"processed rows are deleted this long after processed_at; must outlast the topics' retention"`
	// DeadRetention is how long dead and rejected rows are kept after they
	// went dead (or were rejected); 0 keeps them until requeued or discarded.
	DeadRetention time.Duration `env:"INBOXD_DEAD_RETENTION" help:"dead and rejected rows are deleted this long after they failed; 0 = kept (a dead row holding back its key, on_dead: block, is kept)"`
	// RetentionInterval is how often each replica deletes expired rows.
	RetentionInterval time.Duration `env:"INBOXD_RETENTION_INTERVAL" help:"time between two retention passes"`
	// StaleAfter is the age (by received_at) past which a received row counts
	// as stale in inboxd_inbox_stale_rows.
	StaleAfter time.Duration `env:"INBOXD_STALE_AFTER" help:"received rows older than this (by received_at) count as stale"`
	// StatsInterval is how often each replica refreshes the inbox gauges.
	StatsInterval time.Duration `env:"INBOXD_STATS_INTERVAL" help:"how often the inbox gauges are refreshed"`
	// Outbox runs the outbox relay: the outbox table's rows are published
	// through the brokers of the source settings (INBOXD_KAFKA_BROKERS,
	// INBOXD_AMQP_URL, INBOXD_NATS_URL); a broker without topics, queues or
	// streams then publishes only.
	Outbox bool `env:"INBOXD_OUTBOX" envDefault:"false" help:"run the outbox relay: publish the outbox table through the brokers of INBOXD_KAFKA_BROKERS, INBOXD_AMQP_URL and INBOXD_NATS_URL (without topics, queues or streams they publish only)"`
	// OutboxBatchSize caps the outbox rows published at once.
	OutboxBatchSize int `env:"INBOXD_OUTBOX_BATCH_SIZE" help:"outbox rows read and published at once"`
	// OutboxPollInterval is how long the relay waits after finding nothing.
	OutboxPollInterval time.Duration `env:"INBOXD_OUTBOX_POLL_INTERVAL" help:"how long the outbox relay waits, having found nothing, before it reads again"`
	// OutboxLease is an outbox shard lease's length.
	OutboxLease time.Duration `env:"INBOXD_OUTBOX_LEASE" help:"an outbox shard lease, renewed every third of it: a stopped relay's shards are taken over within it"`
	// OutboxPublishTimeout bounds the publication of one batch.
	OutboxPublishTimeout time.Duration `env:"INBOXD_OUTBOX_PUBLISH_TIMEOUT" envDefault:"0s" help:"bound on publishing one outbox batch, at most a third of INBOXD_OUTBOX_LEASE; 0 = 5s, or a third of the lease when that is shorter"`
	// OutboxMaxAttempts is how many refusals an outbox row takes before it
	// goes dead.
	OutboxMaxAttempts int `env:"INBOXD_OUTBOX_MAX_ATTEMPTS" help:"broker refusals an outbox row takes before it goes dead (an unreachable broker costs none)"`
	// OutboxRetention is how long published outbox rows are kept.
	OutboxRetention time.Duration `env:"INBOXD_OUTBOX_RETENTION" help:"published outbox rows are deleted this long after their publication"`
	// OutboxKafkaCompression is the codec of the relay's Kafka batches.
	OutboxKafkaCompression string `env:"INBOXD_OUTBOX_KAFKA_COMPRESSION" help:"codec of the outbox relay's Kafka batches: gzip or none (both read by every mainstream client as they are), snappy, lz4 or zstd (kafkajs and some others need a plug-in)"`

	// Routes names the routes file (YAML); empty means every type goes to the
	// default route, dead.
	Routes string `env:"INBOXD_ROUTES" help:"routes file (YAML); empty = every type goes to the default route, dead"`

	// HTTPAddr is where /metrics, /healthz and /readyz are served; empty
	// disables the server.
	HTTPAddr string `env:"INBOXD_HTTP_ADDR" envDefault:":8080" help:"address of /metrics, /healthz, /readyz and the console (/ui/); empty disables them"`
	// UITokenFile names a file holding the token of the console's actions
	// (served under /ui/ by `inboxd run` and `inboxd ui`); empty makes the
	// console read-only. The token itself is read by UIToken, never kept
	// in Config.
	UITokenFile string `env:"INBOXD_UI_TOKEN_FILE" help:"file holding the token that the console (/ui/) asks for before any action (requeue, discard, pause); empty = the console is read-only"`
	// UIUsersFile names the console's users file: a line per operator,
	// "name role sha256:<hex of the token's SHA-256>" (or "-" for one who
	// signs in through the proxy alone); read again when it changes.
	UIUsersFile string `env:"INBOXD_UI_USERS_FILE" help:"the console's users file: a line per operator, name role (viewer, operator, admin) and sha256:<hex> of their token (- for the proxy's users); read again when it changes, no restart"`
	// UIProxyHeader names the header a trusted reverse proxy passes the
	// signed-in operator's name in.
	UIProxyHeader string `env:"INBOXD_UI_PROXY_HEADER" help:"header in which a trusted single sign-on proxy passes the operator's name (X-Auth-Request-User, X-Forwarded-Email); needs INBOXD_UI_TRUSTED_PROXIES"`
	// UITrustedProxies are the addresses the proxy connects from.
	UITrustedProxies []string `env:"INBOXD_UI_TRUSTED_PROXIES" envSeparator:"," help:"comma list of the addresses or CIDR ranges the single sign-on proxy connects from; INBOXD_UI_PROXY_HEADER is ignored from anywhere else"`
	// UIProxyRole is the role of a proxy's user the users file does not
	// name; none refuses them.
	UIProxyRole string `env:"INBOXD_UI_PROXY_ROLE" envDefault:"viewer" help:"role of a proxy's user that INBOXD_UI_USERS_FILE does not name: viewer, operator, admin, or none (refused)"`
	// UIProxySignOutURL is where the console's sign-out sends a proxy's
	// user next.
	UIProxySignOutURL string `env:"INBOXD_UI_PROXY_SIGNOUT_URL" help:"where the console's sign-out sends a proxy's user next, to end the proxy's session too (oauth2-proxy: /oauth2/sign_out); empty = the console's session alone"`
	// UISessionTTL is how long a console sign-in lasts.
	UISessionTTL time.Duration `env:"INBOXD_UI_SESSION_TTL" envDefault:"8h" help:"how long a console sign-in lasts; sign-out ends it sooner"`
	// UIBulkAdminOver is the number of rows over which a console action on
	// a filter or a selection needs an admin.
	UIBulkAdminOver int64 `env:"INBOXD_UI_BULK_ADMIN_OVER" envDefault:"1000" help:"a console action on more rows than this (a filter or a selection) needs the admin role"`
	// UIShowPayloads shows rows' payloads in the console; they are hidden
	// otherwise, since they may hold personal data.
	UIShowPayloads bool `env:"INBOXD_UI_SHOW_PAYLOADS" envDefault:"false" help:"show rows' payloads in the console (/ui/); hidden by default, since they may hold personal data"`
	// Operator names who runs the CLI's actions (requeue, discard,
	// cancel, retry, route pause) in the audit trail when --by is not
	// given; "" is $USER@host.
	Operator string `env:"INBOXD_OPERATOR" help:"who runs the CLI's actions (requeue, discard, cancel, retry, route pause), as the audit trail records it, when --by is not given; empty = $USER@host"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `env:"INBOXD_LOG_LEVEL" envDefault:"info" help:"debug, info, warn or error"`
	// LogFormat is json, text, or auto: text when the logs go to a
	// terminal, else json (see LogText).
	LogFormat string `env:"INBOXD_LOG_FORMAT" envDefault:"auto" help:"json (a JSON object a line), text (for people; console is its old name), or auto: text when stderr is a terminal, else json"`
}

// Load reads the configuration from environ (a list of KEY=value pairs as
// returned by os.Environ), resolves *_FILE secrets and validates the result.
//
// Every problem is reported, one line per bad variable: values that do not
// parse (a bad duration or number) and values that parse but are out of
// range come together in one error. A variable that did not parse takes its
// default while the others are validated, and no validation line about it
// or mentioning it is added to its parse error.
func Load(environ []string) (Config, error) {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	var errs []error
	failed := make(map[string]bool) // variables already reported
	// An unset (or empty) variable leaves its field alone: the engine's
	// default set here, or the field's envDefault.
	c := Defaults()
	if err := env.ParseWithOptions(&c, env.Options{Environment: vars}); err != nil {
		perrs, names := parseErrors(err)
		errs = append(errs, perrs...)
		// Parse again without the variables that failed, so that they take
		// their defaults and the rest is validated against sane values.
		rest := make(map[string]string, len(vars))
		for k, v := range vars {
			if !names[k] {
				rest[k] = v
			}
		}
		c = Defaults()
		if err := env.ParseWithOptions(&c, env.Options{Environment: rest}); err != nil {
			// Only an error without a variable name is left (none is known).
			more, _ := parseErrors(err)
			return Config{}, errors.Join(append(errs, more...)...)
		}
		for k := range names {
			failed[k] = true
		}
	}
	// Set but empty means "off" here, not "use the default".
	if v, ok := vars["INBOXD_HTTP_ADDR"]; ok && strings.TrimSpace(v) == "" {
		c.HTTPAddr = ""
	}
	c.KafkaBrokers = dropEmpty(c.KafkaBrokers)
	c.KafkaTopics = dropEmpty(c.KafkaTopics)
	c.AMQPQueues = dropEmpty(c.AMQPQueues)
	c.NATSStreams = dropEmpty(c.NATSStreams)
	c.NATSSubjects = dropEmpty(c.NATSSubjects)
	c.EventIDHeaders = dropEmpty(c.EventIDHeaders)
	c.EventTypeHeaders = dropEmpty(c.EventTypeHeaders)

	if c.DatabaseURL == "" && c.DatabaseURLFile != "" {
		s, err := readSecret(c.DatabaseURLFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("INBOXD_DATABASE_URL_FILE: %w", err))
			failed["INBOXD_DATABASE_URL_FILE"], failed["INBOXD_DATABASE_URL"] = true, true
		}
		c.DatabaseURL = s
	}
	if c.AMQPURL == "" && c.AMQPURLFile != "" {
		s, err := readSecret(c.AMQPURLFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("INBOXD_AMQP_URL_FILE: %w", err))
			failed["INBOXD_AMQP_URL_FILE"], failed["INBOXD_AMQP_URL"] = true, true
		}
		c.AMQPURL = s
	}
	if c.NATSURL == "" && c.NATSURLFile != "" {
		s, err := readSecret(c.NATSURLFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("INBOXD_NATS_URL_FILE: %w", err))
			failed["INBOXD_NATS_URL_FILE"], failed["INBOXD_NATS_URL"] = true, true
		}
		c.NATSURL = s
	}
	if c.KafkaSASLPassword == "" && c.KafkaSASLPasswordFile != "" {
		s, err := readSecret(c.KafkaSASLPasswordFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("INBOXD_KAFKA_SASL_PASSWORD_FILE: %w", err))
			failed["INBOXD_KAFKA_SASL_PASSWORD_FILE"], failed["INBOXD_KAFKA_SASL_PASSWORD"] = true, true
		}
		c.KafkaSASLPassword = s
	}
	if c.UITokenFile != "" {
		if _, err := c.UIToken(); err != nil {
			errs = append(errs, fmt.Errorf("INBOXD_UI_TOKEN_FILE: %w", err))
			failed["INBOXD_UI_TOKEN_FILE"] = true
		}
	}
	if err := c.Validate(); err != nil {
		for _, e := range splitJoined(err) {
			if !mentionsAny(e.Error(), failed) {
				errs = append(errs, e)
			}
		}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// Defaults returns the configuration with the engines' defaults set
// for every setting that maps to one (see app's workerConfig, ingestConfig
// and retentionConfig), before the environment (and the envDefault tags of
// the daemon's own settings) is applied. Settings whose engine default is
// the zero value (INBOXD_PREFETCH 0 = adaptive, INBOXD_DEAD_RETENTION 0 =
// kept) are left zero.
func Defaults() Config {
	mapping := ingest.DefaultMapOptions()
	return Config{
		StatementTimeout:    worker.DefaultStatementTimeout,
		KafkaClientID:       ingest.DefaultClientID,
		KafkaSessionTimeout: ingest.DefaultSessionTimeout,
		IngestBatchSize:     ingest.DefaultBatchSize,
		IngestBatchTimeout:  ingest.DefaultBatchTimeout,
		IngestBatchBytes:    ingest.DefaultBatchBytes,
		MaxPayload:          mapping.MaxPayload,
		MaxHeaders:          mapping.MaxHeaders,
		EventIDHeaders:      mapping.EventIDHeaders,
		EventTypeHeaders:    mapping.EventTypeHeaders,
		Workers:             worker.DefaultWorkers,
		ClaimBatch:          worker.DefaultClaimBatch,
		ClaimBytes:          worker.DefaultClaimBytes,
		MaxAttempts:         worker.DefaultMaxAttempts,
		Lease:               worker.DefaultLease,
		BackoffBase:         worker.DefaultBackoffBase,
		BackoffMax:          worker.DefaultBackoffMax,
		PollInterval:        worker.DefaultPollInterval,
		ShutdownTimeout:     worker.DefaultShutdownTimeout,
		Retention:           worker.DefaultRetention,
		RetentionInterval:   worker.DefaultRetentionInterval,
		StaleAfter:          worker.DefaultStaleAfter,
		StatsInterval:       worker.DefaultStatsInterval,

		WebhookBodyBudget:   webhook.DefaultBodyBudget,
		WebhookMinBodyRate:  webhook.DefaultMinBodyRate,
		WebhookWriteTimeout: webhook.DefaultWriteTimeout,
		WebhookMaxRequests:  webhook.DefaultMaxRequests,
		NATSConsumer:        nats.DefaultConsumer,

		OutboxBatchSize:    outbox.DefaultBatchSize,
		OutboxPollInterval: outbox.DefaultPollInterval,
		OutboxLease:        outbox.DefaultLease,
		OutboxMaxAttempts:  outbox.DefaultMaxAttempts,
		OutboxRetention:    outbox.DefaultRetention,

		OutboxKafkaCompression: outbox.DefaultKafkaCompression,
	}
}

// splitJoined returns the errors joined in err (by errors.Join), or err.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// mentionsAny reports whether line names one of the variables in names as a
// whole word (INBOXD_LEASE, not INBOXD_LEASE_X).
func mentionsAny(line string, names map[string]bool) bool {
	for name := range names {
		for i := 0; ; {
			j := strings.Index(line[i:], name)
			if j < 0 {
				break
			}
			end := i + j + len(name)
			if end == len(line) || !isNameByte(line[end]) {
				return true
			}
			i = end
		}
	}
	return false
}

func isNameByte(b byte) bool {
	return b == '_' || ('A' <= b && b <= 'Z') || ('0' <= b && b <= '9')
}

// Validate checks every setting and returns one error line per bad value,
// each naming its environment variable.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}
	if c.DatabaseURL == "" {
		bad("INBOXD_DATABASE_URL", "is required (or set INBOXD_DATABASE_URL_FILE)")
	} else if err := checkConnString(c.DatabaseURL); err != nil {
		bad("INBOXD_DATABASE_URL", "%v", err)
	} else if _, err := pgx.ParseConfig(c.DatabaseURL); err != nil {
		// pgx's message may quote the string; never echo it.
		bad("INBOXD_DATABASE_URL", "is not a valid PostgreSQL connection string")
	}
	if c.DatabaseMaxConns < 0 || (c.DatabaseMaxConns > 0 && c.DatabaseMaxConns <= EngineConns) {
		bad("INBOXD_DATABASE_MAX_CONNS", "must be 0 (automatic) or more than %d (the engine's own connections), got %d",
			EngineConns, c.DatabaseMaxConns)
	}
	minDur(&errs, "INBOXD_STATEMENT_TIMEOUT", c.StatementTimeout, worker.MinStatementTimeout)
	minDur(&errs, "INBOXD_IDLE_IN_TRANSACTION_TIMEOUT", c.IdleInTxTimeout, time.Second)

	if len(c.KafkaBrokers) > 0 {
		if len(c.KafkaTopics) == 0 && !c.Outbox {
			bad("INBOXD_KAFKA_TOPICS", "is required when INBOXD_KAFKA_BROKERS is set (unless INBOXD_OUTBOX=true: publish only)")
		}
		if c.KafkaGroup == "" {
			bad("INBOXD_KAFKA_GROUP", "is required when INBOXD_KAFKA_BROKERS is set")
		}
		for _, b := range c.KafkaBrokers {
			if !strings.Contains(b, ":") {
				bad("INBOXD_KAFKA_BROKERS", "%q is not host:port", b)
			}
		}
	}
	if c.KafkaStartOffset != "first" && c.KafkaStartOffset != "last" {
		bad("INBOXD_KAFKA_START_OFFSET", "must be first or last, got %q", c.KafkaStartOffset)
	}
	minDur(&errs, "INBOXD_KAFKA_SESSION_TIMEOUT", c.KafkaSessionTimeout, ingest.MinSessionTimeout)
	if (c.KafkaTLSCertFile == "") != (c.KafkaTLSKeyFile == "") {
		bad("INBOXD_KAFKA_TLS_CERT_FILE", "and INBOXD_KAFKA_TLS_KEY_FILE must be set together")
	}
	switch {
	case c.KafkaSASLMechanism == "":
	case brokers.ValidSASLMechanism(c.KafkaSASLMechanism):
		if c.KafkaSASLUsername == "" {
			bad("INBOXD_KAFKA_SASL_USERNAME", "is required when INBOXD_KAFKA_SASL_MECHANISM is set")
		}
		if c.KafkaSASLPassword == "" {
			bad("INBOXD_KAFKA_SASL_PASSWORD", "is required when INBOXD_KAFKA_SASL_MECHANISM is set (or set INBOXD_KAFKA_SASL_PASSWORD_FILE)")
		}
	default:
		bad("INBOXD_KAFKA_SASL_MECHANISM", "must be %s, got %q", brokers.SASLMechanismsText, c.KafkaSASLMechanism)
	}

	if c.AMQPURL != "" {
		if u, err := url.Parse(c.AMQPURL); err != nil || (u.Scheme != "amqp" && u.Scheme != "amqps") || u.Host == "" {
			// Never echo the URL: it may hold a password.
			bad("INBOXD_AMQP_URL", "is not a valid amqp:// or amqps:// URL")
		} else if u.Scheme != "amqps" && (c.AMQPTLSCAFile != "" || c.AMQPTLSCertFile != "" || c.AMQPTLSKeyFile != "") {
			bad("INBOXD_AMQP_TLS_CA_FILE", "_CERT_FILE and _KEY_FILE need an amqps:// INBOXD_AMQP_URL")
		}
		if len(c.AMQPQueues) == 0 && !c.Outbox {
			bad("INBOXD_AMQP_QUEUES", "is required when INBOXD_AMQP_URL is set (unless INBOXD_OUTBOX=true: publish only)")
		}
	} else if len(c.AMQPQueues) > 0 {
		bad("INBOXD_AMQP_URL", "is required when INBOXD_AMQP_QUEUES is set (or set INBOXD_AMQP_URL_FILE)")
	}
	if c.AMQPPrefetch < 0 || c.AMQPPrefetch > amqpconn.MaxPrefetch {
		bad("INBOXD_AMQP_PREFETCH", "must be between 0 (automatic) and %d, got %d", amqpconn.MaxPrefetch, c.AMQPPrefetch)
	}
	if (c.AMQPTLSCertFile == "") != (c.AMQPTLSKeyFile == "") {
		bad("INBOXD_AMQP_TLS_CERT_FILE", "and INBOXD_AMQP_TLS_KEY_FILE must be set together")
	}

	if c.NATSURL != "" {
		if !natsurl.Valid(c.NATSURL) {
			// Never echo the URL: it may hold a password or a token.
			bad("INBOXD_NATS_URL", "is not a valid nats:// or tls:// URL (or comma list of them)")
		}
		if len(c.NATSStreams) == 0 && !c.Outbox {
			bad("INBOXD_NATS_STREAMS", "is required when INBOXD_NATS_URL is set (unless INBOXD_OUTBOX=true: publish only)")
		}
	} else if len(c.NATSStreams) > 0 {
		bad("INBOXD_NATS_URL", "is required when INBOXD_NATS_STREAMS is set (or set INBOXD_NATS_URL_FILE)")
	}
	for _, st := range c.NATSStreams {
		if strings.ContainsAny(st, natsBadNameChars) {
			bad("INBOXD_NATS_STREAMS", "stream name %q is not valid (it may not hold '.', '*', '>', '/', a backslash or white space)", st)
		}
	}
	if c.NATSConsumer == "" || strings.ContainsAny(c.NATSConsumer, natsBadNameChars) {
		bad("INBOXD_NATS_CONSUMER", "%q is not a valid consumer name (it may not hold '.', '*', '>', '/', a backslash or white space)", c.NATSConsumer)
	}
	if (c.NATSTLSCertFile == "") != (c.NATSTLSKeyFile == "") {
		bad("INBOXD_NATS_TLS_CERT_FILE", "and INBOXD_NATS_TLS_KEY_FILE must be set together")
	}

	if c.WebhookAddr != "" && c.WebhookSources == "" {
		bad("INBOXD_WEBHOOK_SOURCES", "is required when INBOXD_WEBHOOK_ADDR is set")
	} else if c.WebhookAddr == "" && c.WebhookSources != "" {
		bad("INBOXD_WEBHOOK_ADDR", "is required when INBOXD_WEBHOOK_SOURCES is set")
	}
	if c.WebhookAddr != "" && !strings.Contains(c.WebhookAddr, ":") {
		bad("INBOXD_WEBHOOK_ADDR", "%q is not host:port (or :port)", c.WebhookAddr)
	}
	if (c.WebhookTLSCertFile == "") != (c.WebhookTLSKeyFile == "") {
		bad("INBOXD_WEBHOOK_TLS_CERT_FILE", "and INBOXD_WEBHOOK_TLS_KEY_FILE must be set together")
	}
	minDur(&errs, "INBOXD_WEBHOOK_WRITE_TIMEOUT", c.WebhookWriteTimeout, 100*time.Millisecond)
	if c.WebhookMaxRequests < 1 {
		bad("INBOXD_WEBHOOK_MAX_REQUESTS", "must be at least 1, got %d", c.WebhookMaxRequests)
	}
	if c.WebhookBodyBudget < 1 { // how much the sources' max_body needs, the webhook source says
		bad("INBOXD_WEBHOOK_BODY_BUDGET", "must be a positive number of bytes, got %d", c.WebhookBodyBudget)
	}
	if c.WebhookMinBodyRate < 1 {
		bad("INBOXD_WEBHOOK_MIN_BODY_RATE", "must be at least 1 byte per second, got %d", c.WebhookMinBodyRate)
	}

	if c.IngestBatchSize < 1 || c.IngestBatchSize > ingest.MaxBatchSize {
		bad("INBOXD_INGEST_BATCH_SIZE", "must be between 1 and %d, got %d", ingest.MaxBatchSize, c.IngestBatchSize)
	}
	minDur(&errs, "INBOXD_INGEST_BATCH_TIMEOUT", c.IngestBatchTimeout, ingest.MinBatchTimeout)
	if c.MaxPayload < ingest.MinSizeLimit || c.MaxPayload > ingest.MaxPayloadLimit {
		bad("INBOXD_MAX_PAYLOAD", "must be between %d and %d bytes, got %d", ingest.MinSizeLimit, ingest.MaxPayloadLimit, c.MaxPayload)
	}
	if c.MaxHeaders < ingest.MinSizeLimit || c.MaxHeaders > ingest.MaxHeadersLimit {
		bad("INBOXD_MAX_HEADERS", "must be between %d and %d bytes, got %d", ingest.MinSizeLimit, ingest.MaxHeadersLimit, c.MaxHeaders)
	}
	if c.IngestBatchBytes < ingest.MinSizeLimit || c.IngestBatchBytes > ingest.MaxBatchBytes {
		bad("INBOXD_INGEST_BATCH_BYTES", "must be between %d and %d bytes, got %d", ingest.MinSizeLimit, ingest.MaxBatchBytes, c.IngestBatchBytes)
	}
	if len(c.EventIDHeaders) == 0 && c.EventIDJSONField == "" {
		bad("INBOXD_EVENT_ID_HEADERS", "must name at least one header (or set INBOXD_EVENT_ID_JSON_FIELD)")
	}
	if len(c.EventTypeHeaders) == 0 && c.EventTypeJSONField == "" {
		bad("INBOXD_EVENT_TYPE_HEADERS", "must name at least one header (or set INBOXD_EVENT_TYPE_JSON_FIELD)")
	}

	if c.Workers < 1 || c.Workers > handlers.MaxConcurrency {
		bad("INBOXD_WORKERS", "must be between 1 and %d, got %d", handlers.MaxConcurrency, c.Workers)
	}
	if c.ClaimBatch < 1 || c.ClaimBatch > worker.MaxClaimBatch {
		bad("INBOXD_CLAIM_BATCH", "must be between 1 and %d, got %d", worker.MaxClaimBatch, c.ClaimBatch)
	}
	if c.ClaimBytes < worker.MinClaimBytes || c.ClaimBytes > worker.MaxClaimBytes {
		bad("INBOXD_CLAIM_BYTES", "must be between %d and %d bytes, got %d", worker.MinClaimBytes, worker.MaxClaimBytes, c.ClaimBytes)
	}
	if c.Prefetch < -1 || c.Prefetch > worker.MaxPrefetch {
		bad("INBOXD_PREFETCH", "must be -1 (none), 0 (automatic) or up to %d, got %d", worker.MaxPrefetch, c.Prefetch)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > handlers.MaxAttemptsLimit {
		bad("INBOXD_MAX_ATTEMPTS", "must be between 1 and %d, got %d", handlers.MaxAttemptsLimit, c.MaxAttempts)
	}
	minDur(&errs, "INBOXD_LEASE", c.Lease, worker.MinLease)
	minDur(&errs, "INBOXD_BACKOFF_BASE", c.BackoffBase, handlers.MinBackoff)
	if c.BackoffMax < c.BackoffBase {
		bad("INBOXD_BACKOFF_MAX", "must be at least INBOXD_BACKOFF_BASE (%s), got %q", c.BackoffBase, c.BackoffMax)
	}
	minDur(&errs, "INBOXD_POLL_INTERVAL", c.PollInterval, worker.MinPollInterval)
	if c.PollInterval > worker.MaxPollInterval {
		bad("INBOXD_POLL_INTERVAL", "must be at most %s, got %q", opfiles.Duration(worker.MaxPollInterval), c.PollInterval)
	}
	minDur(&errs, "INBOXD_SHUTDOWN_TIMEOUT", c.ShutdownTimeout, 0)
	minDur(&errs, "INBOXD_RETENTION", c.Retention, worker.MinRetention)
	if c.DeadRetention != 0 && c.DeadRetention < worker.MinRetention {
		bad("INBOXD_DEAD_RETENTION", "must be 0 (keep) or at least %s, got %q", opfiles.Duration(worker.MinRetention), c.DeadRetention)
	}
	minDur(&errs, "INBOXD_RETENTION_INTERVAL", c.RetentionInterval, worker.MinRetentionInterval)
	minDur(&errs, "INBOXD_STALE_AFTER", c.StaleAfter, worker.MinStaleAfter)
	minDur(&errs, "INBOXD_STATS_INTERVAL", c.StatsInterval, worker.MinStatsInterval)
	if c.OutboxBatchSize < 1 || c.OutboxBatchSize > outbox.MaxBatchSize {
		bad("INBOXD_OUTBOX_BATCH_SIZE", "must be between 1 and %d, got %d", outbox.MaxBatchSize, c.OutboxBatchSize)
	}
	minDur(&errs, "INBOXD_OUTBOX_POLL_INTERVAL", c.OutboxPollInterval, outbox.MinPollInterval)
	minDur(&errs, "INBOXD_OUTBOX_LEASE", c.OutboxLease, outbox.MinLease)
	if c.OutboxPublishTimeout < 0 || c.OutboxPublishTimeout > lease.ShardStep(c.OutboxLease) {
		bad("INBOXD_OUTBOX_PUBLISH_TIMEOUT", "must be 0 (automatic) or at most a third of INBOXD_OUTBOX_LEASE (%s), got %q", lease.ShardStep(c.OutboxLease), c.OutboxPublishTimeout)
	}
	if c.OutboxMaxAttempts < 1 || c.OutboxMaxAttempts > outbox.MaxAttemptsLimit {
		bad("INBOXD_OUTBOX_MAX_ATTEMPTS", "must be between 1 and %d, got %d", outbox.MaxAttemptsLimit, c.OutboxMaxAttempts)
	}
	minDur(&errs, "INBOXD_OUTBOX_RETENTION", c.OutboxRetention, worker.MinRetention)
	if !slices.Contains(outbox.KafkaCompressions, c.OutboxKafkaCompression) {
		bad("INBOXD_OUTBOX_KAFKA_COMPRESSION", "must be one of %s, got %q", strings.Join(outbox.KafkaCompressions, ", "), c.OutboxKafkaCompression)
	}
	if _, err := console.ParseProxy(c.UIProxyHeader, c.UITrustedProxies, c.UIProxyRole, c.UIProxySignOutURL); err != nil {
		errs = append(errs, splitJoined(err)...)
	}
	minDur(&errs, "INBOXD_UI_SESSION_TTL", c.UISessionTTL, time.Minute)
	if c.UIBulkAdminOver < 1 {
		bad("INBOXD_UI_BULK_ADMIN_OVER", "must be at least 1, got %d", c.UIBulkAdminOver)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("INBOXD_LOG_LEVEL", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "json", "text", "console", "auto":
	default:
		bad("INBOXD_LOG_FORMAT", "must be json, text or auto, got %q", c.LogFormat)
	}
	return errors.Join(errs...)
}

func minDur(errs *[]error, name string, d, lowest time.Duration) {
	if d < lowest {
		*errs = append(*errs, fmt.Errorf("%s: must be at least %s, got %q", name, lowest, d))
	}
}

// IngestEnabled reports whether Kafka ingest runs (INBOXD_KAFKA_BROKERS set).
// With INBOXD_OUTBOX=true and no topics, the brokers are published to only.
func (c Config) IngestEnabled() bool { return len(c.KafkaBrokers) > 0 && len(c.KafkaTopics) > 0 }

// AMQPEnabled reports whether the RabbitMQ source runs (INBOXD_AMQP_URL and
// INBOXD_AMQP_QUEUES set).
func (c Config) AMQPEnabled() bool { return c.AMQPURL != "" && len(c.AMQPQueues) > 0 }

// NATSEnabled reports whether the NATS JetStream source runs
// (INBOXD_NATS_URL and INBOXD_NATS_STREAMS set).
func (c Config) NATSEnabled() bool { return c.NATSURL != "" && len(c.NATSStreams) > 0 }

// WebhookEnabled reports whether the webhook source runs
// (INBOXD_WEBHOOK_ADDR set).
func (c Config) WebhookEnabled() bool { return c.WebhookAddr != "" }

// natsBadNameChars are the characters a JetStream stream or consumer name
// cannot hold.
const natsBadNameChars = ".*>/\\ \t\r\n"

// EngineConns is how many connections the engine's own statements get,
// whatever transactional handlers do: claims, two completers, lease
// renewals, the rescuer and statistics, ingest, and the readiness ping.
const EngineConns = 8

// PoolSizes returns the connection pool sizes: the engine's (EngineConns)
// and the transactional handlers' (the rest of INBOXD_DATABASE_MAX_CONNS).
func (c Config) PoolSizes() (engine, tx int) {
	total := c.DatabaseMaxConns
	if total == 0 {
		total = EngineConns + max(2, c.Workers/4)
	}
	return EngineConns, total - EngineConns
}

// PoolConfig builds a pgx pool configuration of maxConns connections with
// the session settings that keep transactions short (statement_timeout,
// idle_in_transaction_session_timeout), JIT compilation off and an
// application_name.
func (c Config) PoolConfig(applicationName string, maxConns int) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, errors.New("INBOXD_DATABASE_URL: is not a valid PostgreSQL connection string")
	}
	rp := pc.ConnConfig.RuntimeParams
	if _, ok := rp["application_name"]; !ok && applicationName != "" {
		rp["application_name"] = applicationName
	}
	rp["statement_timeout"] = fmt.Sprint(c.StatementTimeout.Milliseconds())
	rp["idle_in_transaction_session_timeout"] = fmt.Sprint(c.IdleInTxTimeout.Milliseconds())
	// No JIT compilation (unless the URL sets jit): inboxd's statements
	// read a few index entries each, but on a large inbox the planner's
	// costs pass jit_above_cost and PostgreSQL compiled them, for tens of
	// milliseconds each time, longer than the statement ran
	// (docs/bench/README.md, "The console on ten million rows").
	if _, ok := rp["jit"]; !ok {
		rp["jit"] = "off"
	}
	pc.MaxConns = int32(max(1, maxConns))
	return pc, nil
}

func dropEmpty(in []string) []string {
	out := in[:0]
	for _, s := range in {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseErrors rewrites the env library's errors into one error per
// variable, and returns the names of the variables that failed.
func parseErrors(err error) ([]error, map[string]bool) {
	names := make(map[string]bool)
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return []error{err}, names
	}
	t := reflect.TypeFor[Config]()
	var out []error
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			name := pe.Name
			if f, ok := t.FieldByName(pe.Name); ok {
				name, _, _ = strings.Cut(f.Tag.Get("env"), ",")
			}
			names[name] = true
			out = append(out, fmt.Errorf("%s: %s", name, describe(pe)))
			continue
		}
		out = append(out, e)
	}
	return out, names
}

func describe(pe env.ParseError) string {
	switch pe.Type {
	case reflect.TypeFor[time.Duration]():
		return "not a duration (use Go syntax such as 250ms, 30s, 5m)"
	case reflect.TypeFor[int](), reflect.TypeFor[int64]():
		return "not a whole number"
	case reflect.TypeFor[bool]():
		return "not a boolean (use true or false)"
	}
	return pe.Err.Error()
}

// UIToken returns the console's token from INBOXD_UI_TOKEN_FILE; "" when
// the variable is not set (a read-only console). A file that cannot be
// read, or holds no token, is an error that never repeats its content.
func (c Config) UIToken() (string, error) {
	if c.UITokenFile == "" {
		return "", nil
	}
	s, err := readSecret(c.UITokenFile)
	if err != nil {
		return "", err
	}
	s = strings.TrimSpace(s)
	if len(s) < 16 {
		return "", errors.New("the file it names must hold a token of at least 16 characters")
	}
	return s, nil
}
