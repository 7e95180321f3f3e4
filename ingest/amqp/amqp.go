package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/handoff"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/amqpmap"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
)

// Config configures the RabbitMQ source (New): RabbitMQ queues consumed into the
// inbox through the persist-then-ack pipeline.
type Config struct {
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
	TLS ingest.TLSConfig
	// Pipeline configures batching, mapping and writes.
	Pipeline ingest.PipelineConfig

	// handOff is the hand-off to the local workers the Inboxd gives
	// the source when it opens it (source.Env.HandOff); nil: none.
	handOff handoff.HandOff
}

// withDefaults returns c with its defaults applied.
func (c Config) withDefaults() Config {
	c.Pipeline = ingestcore.PipelineDefaults(c.Pipeline)
	if c.Prefetch == 0 {
		c.Prefetch = amqpconn.DefaultPrefetch(c.Pipeline.BatchSize, c.Pipeline.BatchBytes, ingestcore.LargestMessage(c.Pipeline.Mapping))
	}
	c.TLS.Enabled = amqpconn.TLSURL(c.URL)
	return c
}

// validate reports every setting that cannot work, one line each; it never
// repeats the URL.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.URL == "" {
		bad("ingest: no RabbitMQ URL (INBOXD_AMQP_URL)")
	} else if !amqpconn.ValidURL(c.URL) {
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
	if c.Prefetch < 1 || c.Prefetch > amqpconn.MaxPrefetch {
		bad("ingest: RabbitMQ prefetch must be between 1 and %d, got %d (INBOXD_AMQP_PREFETCH)", amqpconn.MaxPrefetch, c.Prefetch)
	}
	if brokers.TLS(c.TLS).FilesWithoutTLS() {
		bad("ingest: INBOXD_AMQP_TLS_CA_FILE, _CERT_FILE or _KEY_FILE is set but INBOXD_AMQP_URL is not amqps://")
	}
	if brokers.TLS(c.TLS).HalfKeyPair() {
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

// dialAMQP is amqpconn.Dial, the server's frames read through amqpFrames
// (which takes out a headers table amqp091-go would refuse): the source's
// connections.
func dialAMQP(ctx context.Context, url string, tlsc ingest.TLSConfig) (*amqp.Connection, *amqpFrames, error) {
	var f *amqpFrames
	conn, err := amqpconn.Dial(ctx, url, brokers.TLS(tlsc), func(c net.Conn) net.Conn {
		f = newAMQPFrames(c)
		return f
	})
	if err != nil {
		return nil, nil, err
	}
	return conn, f, nil
}

// amqpSource moves messages of RabbitMQ queues into the inbox table: each
// queue on a connection and a channel of its own, with its QoS, one
// Ack(multiple=true) per channel up to a batch's highest delivery tag once
// its rows are committed, and a new connection, with backoff, whenever a
// queue's is lost: one queue failing never stops the others. Create it
// with openAMQP (New opens it) and start it with Run; Ready and LastProgress may be called
// from any goroutine.
type amqpSource struct {
	*ingestcore.Pipeline

	cfg  Config
	dial func(ctx context.Context) (*amqp.Connection, *amqpFrames, error)

	consuming atomic.Int32 // queues consumed now
	blocked   atomic.Int32 // connections the server blocks (memory or disk alarm)

	queues     []*amqpQueue
	deliveries chan amqpDelivery // from every queue's consumer
	fatal      chan error        // a queue missing at its first connection
	stop       context.CancelFunc
	consumers  sync.WaitGroup

	mu      sync.Mutex
	pending map[amqp.Acknowledger]uint64
}

// openAMQP validates cfg (after applying defaults) and returns an
// amqpSource writing to pool. It does not connect: Run does. Metrics are
// registered with reg (nil registers none) under source_kind=amqp.
func openAMQP(cfg Config, pool *pgxpool.Pool, logger zerolog.Logger, reg prometheus.Registerer) (*amqpSource, error) {
	w, err := ingestcore.WriterOn(pool, cfg.handOff)
	if err != nil {
		return nil, err
	}
	return newAMQP(cfg, w, logger, reg)
}

func newAMQP(cfg Config, w ingestcore.InboxWriter, logger zerolog.Logger, reg prometheus.Registerer) (*amqpSource, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.TLS.Enabled {
		// Read the files now: a bad one is a start-up error, not a
		// connection failure retried forever.
		if _, err := brokers.TLS(cfg.TLS).Build(amqpconn.TLSPrefix); err != nil {
			return nil, fmt.Errorf("ingest: %w", err)
		}
	}
	s := &amqpSource{cfg: cfg, pending: make(map[amqp.Acknowledger]uint64)}
	s.dial = func(ctx context.Context) (*amqp.Connection, *amqpFrames, error) {
		return dialAMQP(ctx, cfg.URL, cfg.TLS)
	}
	for _, q := range cfg.Queues {
		s.queues = append(s.queues, &amqpQueue{s: s, name: q})
	}
	var err error
	s.Pipeline, err = ingestcore.NewPipeline(ingest.SourceAMQP, cfg.Pipeline, w, logger, reg, s.Reachable)
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	return s, nil
}

// Ready reports whether the source runs, its last batch write did not fail,
// it consumes every queue and the server blocks none of its connections.
func (s *amqpSource) Ready() bool { return s.IsReady() }

// Reachable reports whether every queue is consumed, on a connection the
// server does not block.
func (s *amqpSource) Reachable() bool {
	return int(s.consuming.Load()) == len(s.queues) && s.blocked.Load() == 0
}

// LastProgress returns when a message was last fetched or a batch last
// written; zero before the first.
func (s *amqpSource) LastProgress() time.Time { return s.Progress() }

// Run consumes until ctx is cancelled and returns nil then; it returns an
// error when a queue is missing at its first connection (a start-up error
// naming it). Before returning it writes and acknowledges the batch in
// hand within CloseTimeout, then closes the connections: deliveries not
// acknowledged go back to their queues.
func (s *amqpSource) Run(ctx context.Context) error {
	return s.RunSession(ctx, amqpFetcher{s}, func() {}, func() {
		s.Log.Info().Str("url", amqpconn.RedactURL(s.cfg.URL)).Strs("queues", s.cfg.Queues).
			Int("prefetch", s.cfg.Prefetch).Int("batch_size", s.cfg.Pipeline.BatchSize).
			Dur("batch_timeout", s.cfg.Pipeline.BatchTimeout).
			Int64("max_bytes_held", int64(s.cfg.Prefetch)*int64(len(s.cfg.Queues))*int64(ingestcore.LargestMessage(s.cfg.Pipeline.Mapping))).
			Msg("ingest starting")
		s.startConsumers(ctx)
	}, s.stopConsumers)
}

// startConsumers starts one consumer per queue. They outlive ctx: the
// batch in hand at shutdown is still acknowledged on their channels, and
// stopConsumers ends them.
func (s *amqpSource) startConsumers(ctx context.Context) {
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stop = stop
	s.deliveries = make(chan amqpDelivery)
	s.fatal = make(chan error, len(s.queues))
	for _, q := range s.queues {
		s.consumers.Add(1)
		go func() {
			defer s.consumers.Done()
			q.run(cctx)
		}()
	}
}

// stopConsumers ends every consumer and closes its connection: the server
// puts every delivery not acknowledged back in its queue.
func (s *amqpSource) stopConsumers() {
	if s.stop != nil {
		s.stop()
	}
	s.consumers.Wait()
	s.mu.Lock()
	clear(s.pending)
	s.mu.Unlock()
	s.UpdateReady()
}

// amqpQueue is one queue's consumer: a connection with one consuming
// channel, opened again with backoff whenever it is lost.
type amqpQueue struct {
	s       *amqpSource
	name    string
	blocked atomic.Bool

	mu      sync.Mutex
	session *amqpSession // nil while the queue is not consumed
}

// amqpSession is one connection consuming one queue.
type amqpSession struct {
	conn       *amqp.Connection
	ch         *amqp.Channel
	frames     *amqpFrames
	deliveries <-chan amqp.Delivery
	cancelled  <-chan string
	dead       chan struct{} // closed when the session must be replaced
	once       sync.Once
	reason     error
}

type amqpDelivery struct {
	queue      string
	d          amqp.Delivery
	unreadable *amqpmap.Unreadable // the headers table amqpFrames took out, if any
}

func (ss *amqpSession) fail(err error) {
	ss.once.Do(func() { ss.reason = err; close(ss.dead) })
}

// errMissingQueue marks a queue that does not exist.
var errMissingQueue = errors.New("queue does not exist")

// run consumes the queue until ctx ends: it connects, hands the
// deliveries over, and when the session is lost connects again after a
// backoff that grows while sessions keep failing at once. A queue missing
// at its first connection is reported on s.fatal.
func (q *amqpQueue) run(ctx context.Context) {
	s := q.s
	log := s.Log.With().Str("queue", q.name).Logger()
	consumed := false // once: a missing queue is no longer a start-up error
	failures := 0
	for ctx.Err() == nil {
		ss, err := q.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errMissingQueue) && !consumed {
				s.fatal <- err
				return
			}
			failures++
			s.Metrics.FetchErrors.Inc()
			delay := s.Backoff(failures)
			log.Warn().Err(err).Int("attempt", failures).Dur("retry_in", delay).
				Msg("connecting to RabbitMQ failed; retrying with backoff, not ready meanwhile (the other queues go on)")
			backoff.Sleep(ctx, delay)
			continue
		}
		if consumed {
			s.Metrics.Reconnects.Inc()
			log.Info().Msg("reconnected to RabbitMQ; consuming the queue again")
		}
		consumed = true
		began := s.Now()
		q.setSession(ss)
		q.forward(ctx, ss)
		q.setSession(nil)
		s.closeConn(ss.conn)
		if ctx.Err() != nil {
			return
		}
		if s.Now().Sub(began) >= s.Cfg.RetryBackoffMax {
			failures = 0 // the session lived: the next failure starts the backoff again
		}
		failures++
		s.Metrics.FetchErrors.Inc()
		delay := s.Backoff(failures)
		if errors.Is(ss.reason, errConsumerCancelled) {
			log.Error().Int("attempt", failures).Dur("retry_in", delay).
				Msg("RabbitMQ cancelled the consumer (queue deleted?); not ready, reconnecting")
		} else {
			log.Warn().Err(ss.reason).Int("attempt", failures).Dur("retry_in", delay).
				Msg("RabbitMQ connection of the queue lost; reconnecting with backoff, not ready meanwhile (the other queues go on)")
		}
		backoff.Sleep(ctx, delay)
	}
}

// setSession records that ss consumes the queue (nil: nothing does), for
// readiness, and drops the acknowledgements pending on a session that
// ended: the server put its deliveries back in the queue.
func (q *amqpQueue) setSession(ss *amqpSession) {
	q.mu.Lock()
	old := q.session
	q.session = ss
	q.mu.Unlock()
	if ss != nil {
		q.s.consuming.Add(1)
	} else if old != nil {
		q.s.consuming.Add(-1)
		if q.blocked.Swap(false) {
			q.s.blocked.Add(-1)
		}
		q.s.mu.Lock()
		delete(q.s.pending, old.ch)
		q.s.mu.Unlock()
	}
	q.s.UpdateReady()
}

// forward hands the session's deliveries to the pipeline until the
// session ends or ctx does.
func (q *amqpQueue) forward(ctx context.Context, ss *amqpSession) {
	ds := ss.deliveries
	for {
		var d amqp.Delivery
		var ok bool
		select {
		case d, ok = <-ds:
		case <-ss.dead:
			return
		case <-ctx.Done():
			return
		}
		if !ok {
			// The server cancelled the consumer, or the channel closed:
			// then the watcher says why.
			if ss.cancelledByServer() {
				ss.fail(errConsumerCancelled)
			}
			select {
			case <-ss.dead:
			case <-ctx.Done():
			}
			return
		}
		del := amqpDelivery{queue: q.name, d: d}
		if u, found := ss.frames.take(d.ConsumerTag, d.DeliveryTag); found {
			del.unreadable = &u
		}
		select {
		case q.s.deliveries <- del:
		case <-ss.dead:
			return
		case <-ctx.Done():
			return
		}
	}
}

// connect opens a session: the connection, a channel, a passive declare
// (the queue must exist), its QoS and the consumer.
func (q *amqpQueue) connect(ctx context.Context) (*amqpSession, error) {
	s := q.s
	conn, frames, err := s.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("connect to RabbitMQ at %s: %w", amqpconn.RedactURL(s.cfg.URL), err)
	}
	fail := func(err error) (*amqpSession, error) { s.closeConn(conn); return nil, err }
	ch, err := conn.Channel()
	if err != nil {
		return fail(fmt.Errorf("open a channel: %w", err))
	}
	if _, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil); err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fail(fmt.Errorf("RabbitMQ queue %q (INBOXD_AMQP_QUEUES): %w", q.name, errMissingQueue))
		}
		return fail(fmt.Errorf("check RabbitMQ queue %q: %w", q.name, err))
	}
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return fail(fmt.Errorf("set the prefetch of queue %q: %w", q.name, err))
	}
	ds, err := ch.Consume(q.name, "inboxd-"+q.name, false, false, false, false, nil)
	if err != nil {
		return fail(fmt.Errorf("consume RabbitMQ queue %q: %w", q.name, err))
	}
	ss := &amqpSession{conn: conn, ch: ch, frames: frames, deliveries: ds, dead: make(chan struct{}),
		cancelled: ch.NotifyCancel(make(chan string, 1))}
	chClosed := ch.NotifyClose(make(chan *amqp.Error, 1))
	connClosed := conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
	go func() {
		for {
			select {
			case err := <-chClosed:
				if err != nil {
					ss.fail(fmt.Errorf("channel of queue %q closed: %w", q.name, err))
				} else {
					ss.fail(fmt.Errorf("channel of queue %q closed", q.name))
				}
				return
			case err := <-connClosed:
				if err != nil {
					ss.fail(fmt.Errorf("connection closed: %w", err))
				} else {
					ss.fail(errors.New("connection closed"))
				}
				return
			case b, ok := <-blocked:
				if !ok {
					blocked = nil // closed with the connection: wait for connClosed
					continue
				}
				q.onBlocked(b)
			case <-ss.dead:
				return
			}
		}
	}()
	return ss, nil
}

// cancelledByServer reports whether the server cancelled the consumer:
// amqp091-go notifies it before it ends the deliveries (a closed channel
// closes the notification channel instead).
func (ss *amqpSession) cancelledByServer() bool {
	select {
	case _, ok := <-ss.cancelled:
		return ok
	default:
		return false
	}
}

// errConsumerCancelled is a consumer the server cancelled: its queue was
// deleted, or it lost its leader.
var errConsumerCancelled = errors.New("consumer cancelled by the server")

// onBlocked handles the server's connection.blocked and
// connection.unblocked on the queue's connection: a memory or disk alarm
// on the broker.
func (q *amqpQueue) onBlocked(b amqp.Blocking) {
	if q.blocked.Swap(b.Active) != b.Active {
		if b.Active {
			q.s.blocked.Add(1)
		} else {
			q.s.blocked.Add(-1)
		}
	}
	q.s.UpdateReady()
	if b.Active {
		q.s.Log.Error().Str("queue", q.name).Str("reason", b.Reason).
			Msg("RabbitMQ blocked the connection (memory or disk alarm); not ready until it is unblocked")
	} else {
		q.s.Log.Info().Str("queue", q.name).Msg("RabbitMQ unblocked the connection")
	}
}

// closeConn closes conn, waiting for the server's answer CloseTimeout at
// most (a server cut off the network would hold a plain Close until the
// heartbeats time out).
func (s *amqpSource) closeConn(conn *amqp.Connection) {
	_ = conn.CloseDeadline(time.Now().Add(s.cfg.Pipeline.CloseTimeout))
}

// amqpFetcher is the amqpSource as the pipeline's source.
type amqpFetcher struct{ s *amqpSource }

func (f amqpFetcher) Fetch(ctx context.Context) (ingestcore.Row, error) {
	s := f.s
	select {
	case d := <-s.deliveries:
		s.mu.Lock()
		if d.d.DeliveryTag > s.pending[d.d.Acknowledger] {
			s.pending[d.d.Acknowledger] = d.d.DeliveryTag
		}
		s.mu.Unlock()
		s.Progressed()
		row := amqpmap.MapRead(d.queue, d.d, d.unreadable, ingestcore.MapDefaults(s.cfg.Pipeline.Mapping))
		if d.unreadable != nil {
			s.Log.Warn().Str("queue", d.queue).Str("event_id", row.EventID).Str("reason", d.unreadable.Why).
				Int("headers_bytes", d.unreadable.Size).
				Msg("a delivery's headers table the RabbitMQ client cannot read; stored as a rejected row without it")
		}
		return row, nil
	case err := <-s.fatal:
		return ingestcore.Row{}, ingestcore.FatalError{Err: err}
	case <-ctx.Done():
		return ingestcore.Row{}, ctx.Err()
	}
}

// seal returns one Ack(multiple=true) per channel, up to the highest
// delivery tag fetched on it since the previous seal. A channel's tags rise
// in delivery order, and the pipeline fetches in that order, so the ack
// covers exactly this batch's deliveries on the channel (and none of the
// next batch's). A channel closed meanwhile refuses it: its deliveries were
// put back in the queue by the server and will be deduplicated.
func (f amqpFetcher) Seal() ingestcore.AckFunc {
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

// FetchFailed words a fetch error; the AMQP fetch returns none but the
// fatal one (each queue's consumer logs its own failures).
func (amqpFetcher) FetchFailed() string {
	return "consuming from RabbitMQ failed"
}
