package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
)

// AMQPKeyHeader is the AMQP header whose value is a message's key (for
// ordered routes); without it the key is the routing key the message was
// published with. A header wins because the routing key often names the
// kind of event ("orders.created") rather than the entity it is about.
const AMQPKeyHeader = "key"

// The AMQP properties stored among a row's headers, beside the headers
// table: the ones that carry meaning for a handler.
const (
	// AMQPContentTypeHeader holds the content-type property.
	AMQPContentTypeHeader = "content-type"
	// AMQPCorrelationIDHeader holds the correlation-id property.
	AMQPCorrelationIDHeader = "correlation-id"
	// AMQPTimestampHeader holds the timestamp property (RFC 3339, UTC).
	AMQPTimestampHeader = "timestamp"
	// AMQPMessageIDHeader holds the message_id property, so that a
	// rejected row keeps it and `inboxd requeue` can map it again.
	AMQPMessageIDHeader = "amqp-message-id"
	// AMQPTypeHeader holds the type property, for the same reason.
	AMQPTypeHeader = "amqp-type"
)

// amqpDialTimeout bounds connecting to RabbitMQ, handshakes included.
const amqpDialTimeout = 10 * time.Second

// AMQPConfig configures an AMQPSource: RabbitMQ queues consumed into the
// inbox through the persist-then-ack pipeline.
type AMQPConfig struct {
	// URL is the broker's amqp:// or amqps:// URL. Its password is never
	// logged.
	URL string
	// Queues lists the queues consumed; each must exist, and its name is
	// the source of its rows.
	Queues []string
	// Prefetch is each queue's channel QoS: how many deliveries the broker
	// sends ahead of their acknowledgement. Zero picks twice BatchSize,
	// capped so that the deliveries held stay within 4 x BatchBytes of the
	// largest messages accepted (about 60 with the default 1 MiB payload
	// bound). Deliveries are acknowledged per batch, so the prefetch also
	// caps the batches: with small messages, a lower MaxPayload or an
	// explicit prefetch of a few times BatchSize ingests several times
	// faster, holding up to Prefetch x the largest message per queue.
	Prefetch int
	// TLS configures amqps://: CA bundle and client certificate. Enabled
	// follows the URL's scheme.
	TLS TLSConfig
	// Pipeline configures batching, mapping and writes.
	Pipeline PipelineConfig
}

// withDefaults returns c with its defaults applied.
func (c AMQPConfig) withDefaults() AMQPConfig {
	c.Pipeline = c.Pipeline.withDefaults()
	if c.Prefetch == 0 {
		held := max(1, 4*c.Pipeline.BatchBytes/max(1, c.Pipeline.Mapping.largestMessage()))
		c.Prefetch = min(2*c.Pipeline.BatchSize, held)
	}
	c.TLS.Enabled = amqpsURL(c.URL)
	return c
}

// amqpsURL reports whether url asks for TLS: AMQP's TLS follows the
// scheme.
func amqpsURL(url string) bool { return strings.HasPrefix(strings.ToLower(url), "amqps://") }

// amqpTLSPrefix names the TLS variables in errors.
const amqpTLSPrefix = "INBOXD_AMQP_TLS"

// DialAMQP opens a connection to the RabbitMQ server at url, as the
// AMQPSource does for its queues and the outbox for its exchanges: TLS
// (tls's files, enabled by an amqps:// URL whatever tls.Enabled says),
// 10s heartbeats, connection_name "inboxd". ctx bounds the TCP connection;
// the TLS and AMQP handshakes are bounded by amqpDialTimeout, or ctx's
// deadline when it comes first (not by its cancellation).
func DialAMQP(ctx context.Context, url string, tls TLSConfig) (*amqp.Connection, error) {
	c := amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US",
		Properties: amqp.Table{"connection_name": "inboxd"}}
	if tls.Enabled = amqpsURL(url); tls.Enabled {
		tc, err := tls.Build(amqpTLSPrefix)
		if err != nil {
			return nil, err
		}
		c.TLSClientConfig = tc
	}
	c.Dial = func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: amqpDialTimeout}
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// As amqp.DefaultDial: a deadline for the TLS and AMQP handshakes
		// (heartbeats have not started), cleared once the connection is
		// open; ctx's deadline if it comes first.
		deadline := time.Now().Add(amqpDialTimeout)
		if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
			deadline = dl
		}
		if err := conn.SetDeadline(deadline); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return conn, nil
	}
	return amqp.DialConfig(url, c)
}

// Validate reports every setting that cannot work, one line each; it never
// repeats the URL.
func (c AMQPConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.URL == "" {
		bad("ingest: no RabbitMQ URL (INBOXD_AMQP_URL)")
	} else if _, err := amqp.ParseURI(c.URL); err != nil {
		bad("ingest: INBOXD_AMQP_URL is not a valid amqp:// or amqps:// URL")
	}
	if len(c.Queues) == 0 {
		bad("ingest: no RabbitMQ queues (INBOXD_AMQP_QUEUES)")
	}
	seen := map[string]bool{}
	for _, q := range c.Queues {
		if seen[q] {
			bad("ingest: RabbitMQ queue %q is listed twice (INBOXD_AMQP_QUEUES)", q)
		}
		seen[q] = true
	}
	if c.Prefetch < 1 || c.Prefetch > 65535 {
		bad("ingest: RabbitMQ prefetch must be between 1 and 65535, got %d (INBOXD_AMQP_PREFETCH)", c.Prefetch)
	}
	if !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.CertFile != "" || c.TLS.KeyFile != "") {
		bad("ingest: INBOXD_AMQP_TLS_CA_FILE, _CERT_FILE or _KEY_FILE is set but INBOXD_AMQP_URL is not amqps://")
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("ingest: INBOXD_AMQP_TLS_CERT_FILE and INBOXD_AMQP_TLS_KEY_FILE must be set together")
	}
	if c.Pipeline.BatchSize < 1 {
		bad("ingest: batch size must be at least 1, got %d", c.Pipeline.BatchSize)
	}
	if c.Pipeline.BatchBytes < 1 {
		bad("ingest: batch bytes must be at least 1, got %d", c.Pipeline.BatchBytes)
	}
	return errors.Join(errs...)
}

// RedactAMQPURL reduces an AMQP URL to amqp[s]://user@host:port/vhost, for
// logs: never the password. A URL that does not parse gives "(invalid)".
func RedactAMQPURL(s string) string {
	u, err := amqp.ParseURI(s)
	if err != nil {
		return "(invalid)"
	}
	out := url.URL{Scheme: u.Scheme, Host: net.JoinHostPort(u.Host, strconv.Itoa(u.Port)), Path: "/" + u.Vhost}
	if u.Username != "" {
		out.User = url.User(u.Username)
	}
	return out.String()
}

// AMQPSource moves messages of RabbitMQ queues into the inbox table: one
// channel per queue with its QoS, one Ack(multiple=true) per channel up to a
// batch's highest delivery tag once its rows are committed, and a new
// connection, with backoff, whenever the old one is lost. Create it with
// NewAMQP and start it with Run; Ready and LastProgress may be called from
// any goroutine.
type AMQPSource struct {
	*pipeline

	cfg  AMQPConfig
	dial func(ctx context.Context) (*amqp.Connection, error)

	connected atomic.Bool // a session consumes every queue
	blocked   atomic.Bool // the server blocked the connection (memory or disk alarm)

	mu      sync.Mutex
	session *amqpSession // nil while disconnected
	pending map[amqp.Acknowledger]uint64
	started bool // a session was opened once: a missing queue is no longer a start-up error
}

// NewAMQP validates cfg (after applying defaults) and returns an
// AMQPSource writing to pool. It does not connect: Run does. Metrics are
// registered with reg (nil registers none) under source_kind=amqp.
func NewAMQP(cfg AMQPConfig, pool *pgxpool.Pool, logger zerolog.Logger, reg prometheus.Registerer) (*AMQPSource, error) {
	w, err := writerOn(pool, cfg.Pipeline.HandOff)
	if err != nil {
		return nil, err
	}
	return newAMQP(cfg, w, logger, reg)
}

func newAMQP(cfg AMQPConfig, w inboxWriter, logger zerolog.Logger, reg prometheus.Registerer) (*AMQPSource, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TLS.Enabled {
		// Read the files now: a bad one is a start-up error, not a
		// connection failure retried forever.
		if _, err := cfg.TLS.Build(amqpTLSPrefix); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	s := &AMQPSource{cfg: cfg, pending: make(map[amqp.Acknowledger]uint64)}
	s.dial = func(ctx context.Context) (*amqp.Connection, error) { return DialAMQP(ctx, cfg.URL, cfg.TLS) }
	var err error
	s.pipeline, err = newPipeline(SourceAMQP, cfg.Pipeline, w, logger, reg,
		func() bool { return s.connected.Load() && !s.blocked.Load() })
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	return s, nil
}

// Ready reports whether the source runs, its last batch write did not fail,
// it consumes every queue and the server does not block its connection.
func (s *AMQPSource) Ready() bool { return s.ready() }

// Reachable reports whether a connection consumes every queue.
func (s *AMQPSource) Reachable() bool { return s.connected.Load() }

// LastProgress returns when a message was last fetched or a batch last
// written; zero before the first.
func (s *AMQPSource) LastProgress() time.Time { return s.progress() }

// Run consumes until ctx is cancelled and returns nil then; it returns an
// error when a queue is missing at the first connection (a start-up
// error naming it). Before returning it writes and acknowledges the batch
// in hand within CloseTimeout, then closes the connection: deliveries not
// acknowledged go back to their queues.
func (s *AMQPSource) Run(ctx context.Context) error {
	return s.runSession(ctx, amqpFetcher{s}, s.reset, func() {
		s.log.Info().Str("url", RedactAMQPURL(s.cfg.URL)).Strs("queues", s.cfg.Queues).
			Int("prefetch", s.cfg.Prefetch).Int("batch_size", s.cfg.Pipeline.BatchSize).
			Dur("batch_timeout", s.cfg.Pipeline.BatchTimeout).
			Int64("max_bytes_held", int64(s.cfg.Prefetch)*int64(len(s.cfg.Queues))*int64(s.cfg.Pipeline.Mapping.largestMessage())).
			Msg("ingest starting")
	}, s.closeSession)
}

// reset readies s for a Run: a missing queue is a start-up error again.
func (s *AMQPSource) reset() {
	s.mu.Lock()
	s.started = false
	s.mu.Unlock()
}

// amqpSession is one connection with one consuming channel per queue.
type amqpSession struct {
	conn       *amqp.Connection
	deliveries chan amqpDelivery
	dead       chan struct{} // closed when the session must be replaced
	once       sync.Once
	reason     error
}

type amqpDelivery struct {
	queue string
	d     amqp.Delivery
}

func (ss *amqpSession) fail(err error) {
	ss.once.Do(func() { ss.reason = err; close(ss.dead) })
}

// errMissingQueue marks a queue that does not exist.
var errMissingQueue = errors.New("queue does not exist")

// connect opens a session: the connection, then per queue a passive
// declare (the queue must exist) and a consuming channel with its QoS.
func (s *AMQPSource) connect(ctx context.Context) (*amqpSession, error) {
	conn, err := s.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ at %s: %w", RedactAMQPURL(s.cfg.URL), err)
	}
	ss := &amqpSession{conn: conn, deliveries: make(chan amqpDelivery), dead: make(chan struct{})}
	fail := func(err error) (*amqpSession, error) { s.closeConn(conn); return nil, err }

	for _, q := range s.cfg.Queues {
		ch, err := conn.Channel()
		if err != nil {
			return fail(fmt.Errorf("open a channel: %w", err))
		}
		if _, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound {
				return fail(fmt.Errorf("RabbitMQ queue %q (INBOXD_AMQP_QUEUES): %w", q, errMissingQueue))
			}
			return fail(fmt.Errorf("check RabbitMQ queue %q: %w", q, err))
		}
		if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
			return fail(fmt.Errorf("set the prefetch of queue %q: %w", q, err))
		}
		tag := "inboxd-" + q
		ds, err := ch.Consume(q, tag, false, false, false, false, nil)
		if err != nil {
			return fail(fmt.Errorf("consume RabbitMQ queue %q: %w", q, err))
		}
		closed := ch.NotifyClose(make(chan *amqp.Error, 1))
		cancelled := ch.NotifyCancel(make(chan string, 1))
		go func() {
			select {
			case err := <-closed:
				if err != nil {
					ss.fail(fmt.Errorf("channel of queue %q closed: %w", q, err))
				} else {
					ss.fail(fmt.Errorf("channel of queue %q closed", q))
				}
			case <-ss.dead:
			}
		}()
		go func() {
			for d := range ds {
				select {
				case ss.deliveries <- amqpDelivery{queue: q, d: d}:
				case <-ss.dead:
					return
				}
			}
			// amqp091-go notifies a cancellation before it ends the
			// deliveries: if there was one, it is waiting here.
			// (A closed channel closes the notification channel instead.)
			select {
			case _, ok := <-cancelled:
				if ok {
					s.log.Error().Str("queue", q).
						Msg("RabbitMQ cancelled the consumer (queue deleted?); not ready, reconnecting")
					ss.fail(fmt.Errorf("consumer of queue %q cancelled by the server", q))
					return
				}
			default:
			}
			ss.fail(fmt.Errorf("deliveries of queue %q ended", q))
		}()
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		for {
			select {
			case err := <-closed:
				if err != nil {
					ss.fail(fmt.Errorf("connection closed: %w", err))
				} else {
					ss.fail(errors.New("connection closed"))
				}
				return
			case b, ok := <-blocked:
				if !ok {
					blocked = nil // closed with the connection: wait for closed
					continue
				}
				s.onBlocked(b)
			case <-ss.dead:
				return
			}
		}
	}()
	return ss, nil
}

// onBlocked handles the server's connection.blocked and
// connection.unblocked: a memory or disk alarm on the broker.
func (s *AMQPSource) onBlocked(b amqp.Blocking) {
	s.blocked.Store(b.Active)
	s.updateReady()
	if b.Active {
		s.log.Error().Str("reason", b.Reason).
			Msg("RabbitMQ blocked the connection (memory or disk alarm); not ready until it is unblocked")
	} else {
		s.log.Info().Msg("RabbitMQ unblocked the connection")
	}
}

// closeSession closes the current session, if any: the server puts every
// delivery not acknowledged back in its queue.
func (s *AMQPSource) closeSession() {
	s.mu.Lock()
	ss := s.session
	s.session = nil
	clear(s.pending)
	s.mu.Unlock()
	s.connected.Store(false)
	s.blocked.Store(false)
	s.updateReady()
	if ss != nil {
		ss.fail(errors.New("closed"))
		s.closeConn(ss.conn)
	}
}

// closeConn closes conn, waiting for the server's answer CloseTimeout at
// most (a server cut off the network would hold a plain Close until the
// heartbeats time out).
func (s *AMQPSource) closeConn(conn *amqp.Connection) {
	_ = conn.CloseDeadline(time.Now().Add(s.cfg.Pipeline.CloseTimeout))
}

// amqpFetcher is the AMQPSource as the pipeline's source.
type amqpFetcher struct{ s *AMQPSource }

func (f amqpFetcher) fetch(ctx context.Context) (Row, error) {
	s := f.s
	s.mu.Lock()
	ss := s.session
	s.mu.Unlock()
	if ss == nil {
		var err error
		if ss, err = s.connect(ctx); err != nil {
			s.mu.Lock()
			started := s.started
			s.mu.Unlock()
			if errors.Is(err, errMissingQueue) && !started {
				return Row{}, fatalError{fmt.Errorf("%w", err)}
			}
			return Row{}, err
		}
		s.mu.Lock()
		if s.started {
			s.metrics.Reconnects.Inc()
			s.log.Info().Msg("reconnected to RabbitMQ; consuming again")
		}
		s.started = true
		s.session = ss
		s.mu.Unlock()
		s.connected.Store(true)
		s.updateReady()
	}
	select {
	case d := <-ss.deliveries:
		s.mu.Lock()
		if d.d.DeliveryTag > s.pending[d.d.Acknowledger] {
			s.pending[d.d.Acknowledger] = d.d.DeliveryTag
		}
		s.mu.Unlock()
		s.progressed()
		return MapDelivery(d.queue, d.d, s.cfg.Pipeline.Mapping), nil
	case <-ss.dead:
		s.closeSession()
		return Row{}, fmt.Errorf("RabbitMQ session lost: %w", ss.reason)
	case <-ctx.Done():
		return Row{}, ctx.Err()
	}
}

// seal returns one Ack(multiple=true) per channel, up to the highest
// delivery tag fetched on it since the previous seal. A channel's tags rise
// in delivery order, and the pipeline fetches in that order, so the ack
// covers exactly this batch's deliveries on the channel (and none of the
// next batch's). A channel closed meanwhile refuses it: its deliveries were
// put back in the queue by the server and will be deduplicated.
func (f amqpFetcher) seal() ackFunc {
	s := f.s
	s.mu.Lock()
	type ack struct {
		ch  amqp.Acknowledger
		tag uint64
	}
	acks := make([]ack, 0, len(s.pending))
	for ch, tag := range s.pending {
		acks = append(acks, ack{ch, tag})
	}
	clear(s.pending)
	s.mu.Unlock()
	return func(context.Context) error {
		var errs []error
		for _, a := range acks {
			if err := a.ch.Ack(a.tag, true); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
}

func (amqpFetcher) fetchFailed() string {
	return "consuming from RabbitMQ failed; reconnecting with backoff, not ready meanwhile"
}

// MapDelivery maps a RabbitMQ delivery from queue to its inbox row. Event
// id: the message_id property, else the headers of opts.EventIDHeaders;
// event type: the type property, else opts.EventTypeHeaders (then the JSON
// fields, as for Kafka). Key: header AMQPKeyHeader, else the routing key.
// Payload: the body. Headers: the headers table (strings as they are, byte
// arrays as bytes, other values as JSON), the properties of AMQPProperties,
// and the message_id and type properties (under AMQPMessageIDHeader and
// AMQPTypeHeader). A message that cannot be accepted
// becomes a rejected row whose event id, derived from the message's
// content, is the same on every redelivery.
func MapDelivery(queue string, d amqp.Delivery, opts MapOptions) Row {
	opts = opts.withDefaults()
	hs := amqpHeaders(d)
	key := []byte(d.RoutingKey)
	if v, ok := lastHeader(hs, AMQPKeyHeader); ok && len(v) > 0 {
		key = v
	}
	if len(key) == 0 {
		key = nil
	}
	return mapMessage(&Message{
		Source:  queue,
		EventID: d.MessageId, EventIDProperty: "message_id",
		EventType: d.Type, EventTypeProperty: "type",
		Key:      key,
		Value:    d.Body,
		Headers:  hs,
		RejectID: amqpRejectID(queue, d, hs),
	}, opts)
}

// amqpHeaders is what a delivery stores as headers: its table, sorted by
// name (a table has no order; sorting makes it stable), then the
// properties that carry meaning.
func amqpHeaders(d amqp.Delivery) []Header {
	names := make([]string, 0, len(d.Headers))
	for k := range d.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	hs := make([]Header, 0, len(names)+5)
	for _, k := range names {
		hs = append(hs, Header{Key: k, Value: amqpValue(d.Headers[k])})
	}
	hs = appendAMQPProperties(hs, &d)
	if d.MessageId != "" {
		hs = append(hs, Header{Key: AMQPMessageIDHeader, Value: []byte(d.MessageId)})
	}
	if d.Type != "" {
		hs = append(hs, Header{Key: AMQPTypeHeader, Value: []byte(d.Type)})
	}
	return hs
}

// amqpValue renders one header table value as bytes.
func amqpValue(v any) []byte {
	switch v := v.(type) {
	case string:
		return []byte(v)
	case []byte:
		return v
	case nil:
		return nil
	case bool:
		return []byte(strconv.FormatBool(v))
	case time.Time:
		return []byte(v.UTC().Format(time.RFC3339Nano))
	case amqp.Decimal:
		return []byte(fmt.Sprintf("%de-%d", v.Value, v.Scale))
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return []byte(fmt.Sprint(v))
		}
		return b
	}
}

// amqpRejectID is the event id of a delivery's rejected row:
// "<queue>/sha256/<hex>" over what the message carries (exchange, routing
// key, id and type properties, headers, body), so a redelivery, which
// carries the same, finds its row already there.
func amqpRejectID(queue string, d amqp.Delivery, hs []Header) string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		l := uint64(len(b))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(d.Exchange))
	field([]byte(d.RoutingKey))
	field([]byte(d.MessageId))
	field([]byte(d.Type))
	for _, x := range hs {
		field([]byte(x.Key))
		field(x.Value)
	}
	field(d.Body)
	return queue + "/sha256/" + hex.EncodeToString(h.Sum(nil))
}

// isAMQPRejectID reports whether id is the event id MapDelivery gives a
// rejected delivery of source: "<source>/sha256/<64 hex digits>" (a Kafka
// position id has a number where "sha256" stands).
func isAMQPRejectID(source, id string) bool {
	sum, ok := strings.CutPrefix(id, source+"/sha256/")
	if !ok || len(sum) != 64 {
		return false
	}
	_, err := hex.DecodeString(sum)
	return err == nil
}

// mapAMQPRejected maps a rejected RabbitMQ row again by RabbitMQ's rules:
// the message_id and type properties, which the row keeps among its
// headers, come before the headers of opts. The key is the row's (header
// key or routing key, resolved when it was first mapped).
func mapAMQPRejected(eventID string, m kafka.Message, opts MapOptions) Row {
	hs := fromKafkaHeaders(m.Headers)
	id, _ := lastHeader(hs, AMQPMessageIDHeader)
	typ, _ := lastHeader(hs, AMQPTypeHeader)
	return mapMessage(&Message{
		Source:  m.Topic,
		EventID: string(id), EventIDProperty: "message_id",
		EventType: string(typ), EventTypeProperty: "type",
		Key:      m.Key,
		Value:    m.Value,
		Headers:  hs,
		RejectID: eventID,
	}, opts.withDefaults())
}
