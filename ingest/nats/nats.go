package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/handoff"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/internal/brokers"
	"github.com/inboxd/inboxd/internal/brokers/natsconn"
	"github.com/inboxd/inboxd/internal/natsurl"
)

// DefaultConsumer is the durable consumer's name when none is given.
const DefaultConsumer = "inboxd"

const (
	// natsAPITimeout bounds one JetStream API request (stream and consumer
	// look-ups, consumer creation).
	natsAPITimeout = 10 * time.Second
	// natsPullWait is how long one pull request waits on the server for
	// messages before a new one is sent.
	natsPullWait = 10 * time.Second
	// natsPullGrace is how long after natsPullWait a pull request whose
	// end the server has not signalled is given up.
	natsPullGrace = time.Second
	// natsCloseFlush bounds, when a session ends, each wait for the
	// server to have read what was sent: an unsubscription, the Naks.
	natsCloseFlush = time.Second
	// natsPullSlack is room, in a pull's inbox beyond its batch, for the
	// server's status messages: nats.go drops a message that finds its
	// subscription's channel full.
	natsPullSlack = 8
	// natsFetchHeadroom is added to the server's max_payload for a pull
	// request's byte bound: room for the subject and reply subject, so
	// that the largest message the server accepts always fits in one pull
	// (a message bigger than a pull's bound is never delivered).
	natsFetchHeadroom = 64 << 10
	// natsMinAckWait is the shortest AckWait given to a created consumer.
	natsMinAckWait = 30 * time.Second
)

// Config configures the NATS JetStream source (New): streams consumed into
// the inbox through the persist-then-ack pipeline, with one durable pull
// consumer per stream.
type Config struct {
	// URL is the server's nats:// or tls:// URL, or a comma list of them
	// (a cluster). A password in it is never logged.
	URL string
	// CredsFile is a NATS credentials file (JWT and NKey seed); empty
	// authenticates with the URL's user, if any.
	CredsFile string
	// Streams lists the streams consumed; each must exist, and its name is
	// the source of its rows.
	Streams []string
	// Consumer is the durable pull consumer's name on every stream
	// (default DefaultConsumer). It is bound when it exists, else
	// created with explicit acknowledgements, starting at the stream's
	// first message.
	Consumer string
	// Subjects, when set, is the subject filter of a created consumer, on
	// every stream (each subject must lie within each stream's subjects).
	// A bound consumer keeps its own filter; a warning says when it
	// differs.
	Subjects []string
	// AckWait is a created consumer's acknowledgement timeout: how long
	// JetStream waits for a delivery's acknowledgement before delivering it
	// again. It must exceed the longest batch write; zero picks
	// max(30s, 2 x Pipeline.WriteTimeout). A batch whose write outlasts it
	// (a slow or failing database, retried) is delivered again, to this
	// replica or another, and the redelivery is absorbed by the inbox's
	// deduplication: wasted work, no double row. A bound consumer keeps its
	// own AckWait; a warning says when it does not exceed WriteTimeout.
	AckWait time.Duration
	// TLS configures TLS to the server: CA bundle and client certificate.
	// Enabled follows a tls:// URL or any file set.
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
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer
	}
	if c.AckWait == 0 {
		c.AckWait = max(natsMinAckWait, 2*c.Pipeline.WriteTimeout)
	}
	c.TLS.Enabled = natsconn.TLSWanted(c.URL, brokers.TLS(c.TLS))
	return c
}

// validNATSName reports whether s can name a stream or a consumer.
func validNATSName(s string) bool {
	return s != "" && !strings.ContainsAny(s, ".*> \t\r\n/\\")
}

// validate reports every setting that cannot work, one line each; it never
// repeats the URL.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(natsurl.Servers(c.URL)) == 0 {
		bad("ingest: no NATS URL (INBOXD_NATS_URL)")
	} else if !natsurl.Valid(c.URL) {
		bad("ingest: INBOXD_NATS_URL is not a valid nats:// or tls:// URL (or comma list of them)")
	}
	if len(c.Streams) == 0 {
		bad("ingest: no NATS streams (INBOXD_NATS_STREAMS)")
	}
	seen := map[string]bool{}
	for _, st := range c.Streams {
		switch {
		case !validNATSName(st):
			bad("ingest: NATS stream name %q is not valid (INBOXD_NATS_STREAMS)", st)
		case seen[st]:
			bad("ingest: NATS stream %q is listed twice (INBOXD_NATS_STREAMS)", st)
		}
		seen[st] = true
	}
	if !validNATSName(c.Consumer) {
		bad("ingest: NATS consumer name %q is not valid (INBOXD_NATS_CONSUMER)", c.Consumer)
	}
	for _, s := range c.Subjects {
		if s == "" || strings.ContainsAny(s, " \t\r\n") {
			bad("ingest: NATS subject filter %q is not valid (INBOXD_NATS_SUBJECTS)", s)
		}
	}
	if c.AckWait <= c.Pipeline.WriteTimeout {
		bad("ingest: NATS AckWait (%s) must exceed the batch write timeout (%s)", c.AckWait, c.Pipeline.WriteTimeout)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		bad("ingest: INBOXD_NATS_TLS_CERT_FILE and INBOXD_NATS_TLS_KEY_FILE must be set together")
	}
	if c.Pipeline.BatchSize < 1 {
		bad("ingest: batch size must be at least 1, got %d", c.Pipeline.BatchSize)
	}
	if c.Pipeline.BatchBytes < 1 {
		bad("ingest: batch bytes must be at least 1, got %d", c.Pipeline.BatchBytes)
	}
	return errors.Join(errs...)
}

// natsSource moves messages of NATS JetStream streams into the inbox table:
// one durable pull consumer per stream, fetched in batches, each message
// acknowledged on its own (never AckAll: replicas share the consumer) once
// its batch's rows are committed. nats.go reconnects by itself; while it is
// disconnected the source is not ready. Create it with openNATS (New opens it) and start it
// with Run; Ready and LastProgress may be called from any goroutine.
type natsSource struct {
	*ingestcore.Pipeline

	cfg     Config
	opts    []nats.Option     // without the connection's handlers
	mapping ingest.MapOptions // cfg's, NATSMsgIDHeader first among the id headers

	// pullWait is how long a pull request waits on the server
	// (natsPullWait; tests shorten it).
	pullWait time.Duration

	mu      sync.Mutex
	session *natsSession // nil while no consumer is bound
	pending []*nats.Msg
	started bool // a session was opened once: a missing stream is no longer a start-up error
}

// openNATS validates cfg (after applying defaults) and returns a natsSource
// writing to pool. It does not connect: Run does. Metrics are registered
// with reg (nil registers none) under source_kind=nats.
func openNATS(cfg Config, pool *pgxpool.Pool, logger zerolog.Logger, reg prometheus.Registerer) (*natsSource, error) {
	w, err := ingestcore.WriterOn(pool, cfg.handOff)
	if err != nil {
		return nil, err
	}
	return newNATS(cfg, w, logger, reg)
}

func newNATS(cfg Config, w ingestcore.InboxWriter, logger zerolog.Logger, reg prometheus.Registerer) (*natsSource, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opts, err := natsconn.Options(cfg.URL, cfg.CredsFile, brokers.TLS(cfg.TLS))
	if err != nil {
		return nil, err
	}
	s := &natsSource{cfg: cfg, opts: opts, mapping: natsmap.MapOptionsFor(cfg.Pipeline.Mapping), pullWait: natsPullWait}
	s.Pipeline, err = ingestcore.NewPipeline(ingest.SourceNATS, cfg.Pipeline, w, logger, reg, s.Reachable)
	if err != nil {
		return nil, fmt.Errorf("ingest: register metrics: %w", err)
	}
	return s, nil
}

// Ready reports whether the source runs, its last batch write did not fail,
// its consumers are bound and its connection is up.
func (s *natsSource) Ready() bool { return s.IsReady() }

// Reachable reports whether every stream's consumer is bound and the
// connection to NATS is up.
func (s *natsSource) Reachable() bool {
	s.mu.Lock()
	ss := s.session
	s.mu.Unlock()
	return ss != nil && ss.nc.IsConnected()
}

// LastProgress returns when a message was last fetched or a batch last
// written; zero before the first.
func (s *natsSource) LastProgress() time.Time { return s.Progress() }

// Run consumes until ctx is cancelled and returns nil then; it returns an
// error when a stream is missing at the first connection (a start-up
// error naming it), or when a consumer of that name exists but cannot keep
// the inbox's guarantee (not a pull consumer, or without explicit
// acknowledgements). Before returning it writes and acknowledges the batch
// in hand within CloseTimeout, then closes the connection: deliveries not
// acknowledged are delivered again after the consumer's AckWait (those
// fetched but not yet batched are handed back at once).
func (s *natsSource) Run(ctx context.Context) error {
	return s.RunSession(ctx, natsFetcher{s}, s.reset, func() {
		s.Log.Info().Str("url", natsurl.Redact(s.cfg.URL)).Strs("streams", s.cfg.Streams).
			Str("consumer", s.cfg.Consumer).Strs("subjects", s.cfg.Subjects).Dur("ack_wait", s.cfg.AckWait).
			Int("batch_size", s.cfg.Pipeline.BatchSize).Dur("batch_timeout", s.cfg.Pipeline.BatchTimeout).
			Msg("ingest starting")
	}, s.closeSession)
}

// reset readies s for a Run: a missing stream is a start-up error again.
func (s *natsSource) reset() {
	s.mu.Lock()
	s.started = false
	s.mu.Unlock()
}

// natsSession is one connection with every stream's consumer bound and a
// goroutine pulling from each.
type natsSession struct {
	nc     *nats.Conn
	msgs   chan natsMsg
	dead   chan struct{} // closed when the session must be replaced
	cancel context.CancelFunc
	pulls  sync.WaitGroup
	once   sync.Once
	reason error

	mu         sync.Mutex
	reconnects chan struct{} // closed, and replaced, at each reconnection
}

// reconnected returns a channel closed at the next reconnection.
func (ss *natsSession) reconnected() <-chan struct{} {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.reconnects
}

// reconnect wakes whoever waits on reconnected.
func (ss *natsSession) reconnect() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	close(ss.reconnects)
	ss.reconnects = make(chan struct{})
}

// natsMsg is one delivery of a stream: the message and its metadata, read
// from its ack subject.
type natsMsg struct {
	stream string
	m      *nats.Msg
	md     *nats.MsgMetadata
}

func (ss *natsSession) fail(err error) {
	ss.once.Do(func() { ss.reason = err; close(ss.dead); ss.cancel() })
}

// errMissingStream marks a stream that does not exist; errUnfitConsumer a
// consumer that exists but cannot keep the inbox's guarantee.
var (
	errMissingStream = errors.New("stream does not exist")
	errUnfitConsumer = errors.New("consumer cannot be used")
)

// connect opens a session: the connection, then per stream its look-up
// (it must exist), its consumer bound or created, and its puller.
func (s *natsSource) connect(ctx context.Context) (*natsSession, error) {
	pctx, cancel := context.WithCancel(context.Background())
	ss := &natsSession{msgs: make(chan natsMsg), dead: make(chan struct{}), cancel: cancel,
		reconnects: make(chan struct{})}
	opts := append(slices.Clip(s.opts),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			s.UpdateReady()
			select {
			case <-ss.dead:
				return // closed on purpose
			default:
			}
			ev := s.Log.Warn()
			if err != nil {
				ev = ev.Err(err)
			}
			ev.Msg("disconnected from NATS; not ready while nats.go reconnects")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			ss.reconnect() // pulls sent before the cut may be lost: send new ones
			s.Metrics.Reconnects.Inc()
			s.UpdateReady()
			s.Log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("reconnected to NATS")
		}),
		nats.ClosedHandler(func(*nats.Conn) { ss.fail(errors.New("connection closed")) }),
	)
	nc, err := nats.Connect(s.cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", natsurl.Redact(s.cfg.URL), err)
	}
	ss.nc = nc
	fail := func(err error) (*natsSession, error) { ss.fail(err); nc.Close(); return nil, err }
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(fmt.Errorf("open JetStream: %w", err))
	}
	consumers := make([]jetstream.Consumer, len(s.cfg.Streams))
	for i, name := range s.cfg.Streams {
		if consumers[i], err = s.bind(ctx, js, name); err != nil {
			return fail(err)
		}
	}
	// A pull never asks for more than the server's largest message can
	// exceed: any message fits in one, and the bytes held stay bounded.
	pullBytes := max(s.cfg.Pipeline.BatchBytes, int(nc.MaxPayload())+natsFetchHeadroom)
	for i, name := range s.cfg.Streams {
		ss.pulls.Add(1)
		go s.pull(pctx, ss, name, consumers[i], pullBytes)
	}
	s.Log.Info().Str("url", nc.ConnectedUrlRedacted()).Int("pull_bytes", pullBytes).
		Int("max_bytes_held", len(s.cfg.Streams)*pullBytes+2*(s.cfg.Pipeline.BatchBytes+ingestcore.LargestMessage(s.cfg.Pipeline.Mapping))).
		Msg("consuming from NATS")
	return ss, nil
}

// bind returns the stream's durable consumer: bound if it exists (never
// changed), else created with explicit acknowledgements, from the stream's
// first message, with AckWait and the subject filter.
func (s *natsSource) bind(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, natsAPITimeout)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("NATS stream %q (INBOXD_NATS_STREAMS): %w", name, errMissingStream)
	}
	if err != nil {
		return nil, fmt.Errorf("look up NATS stream %q: %w", name, err)
	}
	log := s.Log.With().Str("stream", name).Str("consumer", s.cfg.Consumer).Logger()
	cons, err := st.Consumer(ctx, s.cfg.Consumer)
	switch {
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return nil, fmt.Errorf("NATS consumer %q of stream %q is a push consumer (INBOXD_NATS_CONSUMER names a durable pull consumer): %w",
			s.cfg.Consumer, name, errUnfitConsumer)
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cc := jetstream.ConsumerConfig{
			Durable:       s.cfg.Consumer,
			Description:   "inboxd: stores every message in the inbox table, then acknowledges it",
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       s.cfg.AckWait,
			MaxDeliver:    -1, // never drop a message the inbox has not stored
			// Each replica holds up to a batch being written, one filling
			// and one pull.
			MaxAckPending: max(1000, 3*s.cfg.Pipeline.BatchSize),
		}
		if len(s.cfg.Subjects) == 1 {
			cc.FilterSubject = s.cfg.Subjects[0]
		} else {
			cc.FilterSubjects = s.cfg.Subjects
		}
		cons, err = st.CreateConsumer(ctx, cc)
		switch {
		case errors.Is(err, jetstream.ErrConsumerMultipleFilterSubjectsNotSupported):
			// The server created it without the filters: it would consume
			// every subject. It must go.
			_ = st.DeleteConsumer(ctx, s.cfg.Consumer)
			return nil, fmt.Errorf("NATS server too old for several subject filters (INBOXD_NATS_SUBJECTS): %w", errUnfitConsumer)
		case errors.Is(err, jetstream.ErrConsumerExists):
			cons, err = st.Consumer(ctx, s.cfg.Consumer) // another replica created it meanwhile
		case err == nil:
			log.Info().Dur("ack_wait", s.cfg.AckWait).Strs("subjects", s.cfg.Subjects).
				Msg("created the durable consumer, from the stream's first message")
		}
		if err != nil {
			return nil, fmt.Errorf("create NATS consumer %q of stream %q: %w", s.cfg.Consumer, name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("look up NATS consumer %q of stream %q: %w", s.cfg.Consumer, name, err)
	}
	cfg := cons.CachedInfo().Config
	if cfg.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("NATS consumer %q of stream %q acknowledges with %s, not explicit acks: "+
			"inboxd acknowledges each message once stored and needs AckExplicit: %w", s.cfg.Consumer, name, cfg.AckPolicy, errUnfitConsumer)
	}
	if need := s.cfg.Pipeline.WriteTimeout; cfg.AckWait <= need {
		log.Warn().Dur("ack_wait", cfg.AckWait).Dur("write_timeout", need).
			Msg("the consumer's AckWait does not exceed a batch write: a slow write makes JetStream deliver its messages again (deduplicated, but wasted work)")
	}
	if cfg.MaxDeliver > 0 {
		log.Warn().Int("max_deliver", cfg.MaxDeliver).
			Msg("the consumer has MaxDeliver set: a message delivered that many times without being stored (database down) is dropped by JetStream without a row")
	}
	if len(s.cfg.Subjects) > 0 {
		have := append([]string{}, cfg.FilterSubjects...)
		if cfg.FilterSubject != "" {
			have = append(have, cfg.FilterSubject)
		}
		slices.Sort(have)
		want := slices.Sorted(slices.Values(s.cfg.Subjects))
		if !slices.Equal(have, want) {
			log.Warn().Strs("filter", have).Strs("subjects", want).
				Msg("the bound consumer's subject filter differs from INBOXD_NATS_SUBJECTS; the consumer is used as it is")
		}
	}
	return cons, nil
}

// natsPullRequest is the body of a pull request, as the JetStream API
// reads it: at most Batch messages and MaxBytes bytes (each message's
// subject, reply subject, headers and data), within Expires (nanoseconds).
type natsPullRequest struct {
	Batch    int           `json:"batch"`
	Expires  time.Duration `json:"expires"`
	MaxBytes int           `json:"max_bytes,omitempty"`
}

// errSessionOver ends a pull whose session is over.
var errSessionOver = errors.New("session over")

// pull sends one pull request after another to one stream's consumer and
// hands the messages delivered to the pipeline one by one, until the
// session ends; messages it still holds then are handed back to JetStream
// (Nak) for another consumer.
func (s *natsSource) pull(ctx context.Context, ss *natsSession, stream string, cons jetstream.Consumer, pullBytes int) {
	defer ss.pulls.Done()
	log := s.Log.With().Str("stream", stream).Logger()
	subject := jetstream.DefaultAPIPrefix + "CONSUMER.MSG.NEXT." + stream + "." + s.cfg.Consumer
	req, err := json.Marshal(natsPullRequest{Batch: s.cfg.Pipeline.BatchSize, Expires: s.pullWait, MaxBytes: pullBytes})
	if err != nil {
		panic(fmt.Sprintf("ingest: encode a pull request: %v", err)) // two numbers always encode
	}
	failures := 0
	for ctx.Err() == nil {
		err := s.pullOnce(ctx, ss, stream, subject, req, pullBytes)
		if errors.Is(err, errSessionOver) {
			return
		}
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue
		}
		// The consumer or its stream deleted: the session binds again.
		ictx, icancel := context.WithTimeout(ctx, natsAPITimeout)
		_, ierr := cons.Info(ictx)
		icancel()
		if errors.Is(ierr, jetstream.ErrConsumerNotFound) || errors.Is(ierr, jetstream.ErrStreamNotFound) {
			log.Error().Err(ierr).Msg("the NATS consumer or its stream is gone; not ready, binding again")
			ss.fail(fmt.Errorf("consumer %q of stream %q: %w", s.cfg.Consumer, stream, ierr))
			return
		}
		failures++
		s.Metrics.FetchErrors.Inc()
		delay := s.Backoff(failures)
		log.Warn().Err(err).Int("attempt", failures).Dur("retry_in", delay).Msg("pulling from NATS failed; retrying")
		backoff.Sleep(ctx, delay)
	}
}

// pullOnce sends one pull request, on an inbox of its own, and hands every
// message JetStream delivers to it to the pipeline, until the request is
// over. The server ends it: its batch or its bytes delivered, or a status
// saying so (expired: nil). Or the source gives up on it: at a
// reconnection (the request may be lost with the old connection, or sent
// with the new one), when the server's end never comes (natsPullWait +
// natsPullGrace), when the session ends; then abandonPull reads what the
// server has sent to it meanwhile, and nothing on its way is dropped.
//
// A delivery is told from the server's status messages by its reply
// subject: JetStream delivers every stored message with its ack subject
// ($JS.ACK.<stream>.<consumer>..., which also gives its stream sequence and
// the time it was stored), and its own statuses to a pull (100, 404, 408,
// 409, 503) without any. nats.go's Fetch goes by the payload and a header
// named Status instead, so an empty message carrying that header, stored
// like any other, was skipped (Status: 100, never acknowledged) or ended
// the pull with an error and dropped the messages after it (Status: 400):
// here it is a message like any other.
func (s *natsSource) pullOnce(ctx context.Context, ss *natsSession, stream, subject string, req []byte, pullBytes int) error {
	batch := s.cfg.Pipeline.BatchSize
	ch := make(chan *nats.Msg, batch+natsPullSlack)
	sub, err := ss.nc.ChanSubscribe(ss.nc.NewInbox(), ch)
	if err != nil {
		return fmt.Errorf("subscribe to a pull request's inbox: %w", err)
	}
	reconnected := ss.reconnected()
	if err := ss.nc.PublishRequest(subject, sub.Subject, req); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("send a pull request: %w", err)
	}
	expired := time.NewTimer(s.pullWait + natsPullGrace)
	defer expired.Stop()
	var n, size int
	var unreadable error
	// deliver hands one delivery to the pipeline; false: the session is
	// over, and the delivery was handed back.
	deliver := func(m *nats.Msg) bool {
		md, err := m.Metadata()
		if err != nil { // left unacknowledged: delivered again after AckWait
			if unreadable == nil {
				unreadable = fmt.Errorf("a delivery whose ack subject cannot be read: %w", err)
			}
			return true
		}
		select {
		case ss.msgs <- natsMsg{stream: stream, m: m, md: md}:
		case <-ss.dead:
			_ = m.Nak()
			return false
		}
		n++
		size += m.Size() // as the server counts a pull's bytes
		return true
	}
	// giveUp ends the request from this side, what is on its way read.
	giveUp := func() error {
		fctx, cancel := context.WithTimeout(ctx, natsAPITimeout)
		defer cancel()
		if !abandonPull(fctx, ss.nc, sub, ch, deliver) {
			return errSessionOver
		}
		return unreadable
	}
	// handBack ends the request of a session that is over, what is on its
	// way handed back.
	handBack := func() error {
		fctx, cancel := context.WithTimeout(context.Background(), natsCloseFlush)
		defer cancel()
		abandonPull(fctx, ss.nc, sub, ch, natsNak)
		return errSessionOver
	}
	for {
		select {
		case m := <-ch:
			if m.Reply == "" {
				over, err := natsPullStatus(m)
				if over { // the server is done with the request
					_ = sub.Unsubscribe()
					return err
				}
				continue
			}
			if !deliver(m) {
				return handBack()
			}
			if n >= batch || size >= pullBytes { // the server is done with it too
				_ = sub.Unsubscribe()
				return unreadable
			}
			if unreadable != nil {
				return giveUp()
			}
		case <-reconnected:
			return giveUp()
		case <-expired.C:
			return giveUp()
		case <-ss.dead:
			return handBack()
		}
	}
}

// abandonPull ends a pull request that the server may still be answering:
// its inbox unsubscribed, then read until the server has answered a ping
// sent after the unsubscription (or ctx is over). The server reads a
// connection in order: by the pong it has sent to the inbox all it ever
// will for that request, and every delivery it sent is handed to give, in
// order, rather than dropped with the inbox and left to the consumer's
// AckWait (a delivery sent into a connection that broke is lost all the
// same: no client can read it). Statuses read meanwhile are left: the
// request is over. It reports false when give did (the session is over),
// after handing back the rest.
func abandonPull(ctx context.Context, nc *nats.Conn, sub *nats.Subscription, ch <-chan *nats.Msg, give func(*nats.Msg) bool) bool {
	if err := sub.Drain(); err == nil {
		if nc.IsConnected() {
			_ = nc.FlushWithContext(ctx)
		} else {
			// Drained while nats.go reconnects: the unsubscription was not
			// sent, and the subscription would be sent again with the
			// others at the reconnection. The server forgot it with the
			// old connection, so it goes at once.
			_ = sub.Unsubscribe()
		}
	}
	going := true
	for {
		select {
		case m := <-ch:
			if m.Reply == "" {
				continue
			}
			if going {
				going = give(m) // false: handed back, and so is the rest
			} else {
				_ = m.Nak()
			}
		default:
			return going
		}
	}
}

// natsNak hands a delivery back to JetStream, to be delivered again at once.
func natsNak(m *nats.Msg) bool {
	_ = m.Nak()
	return true
}

// natsPullEnded are the descriptions of the 409 statuses that end a pull
// request as requests end, as nats.go matches them (lower case, within
// the description): the next message too big for the bytes left, the
// batch done, the consumer's leader moved, the server shutting down.
var natsPullEnded = []string{"message size exceeds maxbytes", "batch completed", "leadership change", "server shutdown"}

// natsPullStatus reads a message of a pull request's inbox that is not a
// delivery: a status of the server (nats.go has read its status line into
// the Status and Description headers). over reports the request over; err
// is nil when it ended as requests do (expired, its bytes used up, a
// leader or a server changing), not nil when the server refused it (the
// consumer gone, a limit of the consumer's exceeded).
func natsPullStatus(m *nats.Msg) (over bool, err error) {
	code, description := m.Header.Get("Status"), m.Header.Get("Description")
	switch code {
	case "100": // an idle heartbeat; none is asked for
		return false, nil
	case "404", "408": // no messages, request expired
		return true, nil
	case "409":
		for _, ended := range natsPullEnded {
			if strings.Contains(strings.ToLower(description), ended) {
				return true, nil
			}
		}
	case "":
		return false, nil // not from the server: neither a status nor a delivery
	}
	return true, fmt.Errorf("pull request ended by the server: %s %s", code, description)
}

// closeSession closes the current session, if any: its pullers hand back
// what they hold, and JetStream delivers again, after AckWait, every
// message not acknowledged.
func (s *natsSource) closeSession() {
	s.mu.Lock()
	ss := s.session
	s.session = nil
	s.pending = nil
	s.mu.Unlock()
	s.UpdateReady()
	if ss != nil {
		ss.fail(errors.New("closed"))
		ss.pulls.Wait()
		_ = ss.nc.FlushTimeout(natsCloseFlush) // the Naks
		ss.nc.Close()
	}
}

// natsFetcher is the natsSource as the pipeline's source.
type natsFetcher struct{ s *natsSource }

func (f natsFetcher) Fetch(ctx context.Context) (ingestcore.Row, error) {
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
			if !started && (errors.Is(err, errMissingStream) || errors.Is(err, errUnfitConsumer)) {
				return ingestcore.Row{}, ingestcore.FatalError{Err: err}
			}
			return ingestcore.Row{}, err
		}
		s.mu.Lock()
		if s.started {
			s.Metrics.Reconnects.Inc()
			s.Log.Info().Msg("consumers bound again; consuming from NATS")
		}
		s.started = true
		s.session = ss
		s.mu.Unlock()
		s.UpdateReady()
	}
	select {
	case m := <-ss.msgs:
		s.mu.Lock()
		s.pending = append(s.pending, m.m)
		s.mu.Unlock()
		s.Progressed()
		return natsmap.MapParts(m.stream, m.m.Subject, m.m.Header, m.m.Data, m.md.Sequence.Stream, m.md.Timestamp, s.mapping), nil
	case <-ss.dead:
		s.closeSession()
		return ingestcore.Row{}, fmt.Errorf("NATS session lost: %w", ss.reason)
	case <-ctx.Done():
		return ingestcore.Row{}, ctx.Err()
	}
}

// seal returns the acknowledgement of every message fetched since the
// previous seal: an Ack of each (never AckAll, which would acknowledge
// messages that the server delivered to other replicas of the consumer),
// then a flush so that they have reached the server. A message whose
// session was lost meanwhile is not in the list: it is delivered again
// after AckWait and deduplicated.
func (f natsFetcher) Seal() ingestcore.AckFunc {
	s := f.s
	s.mu.Lock()
	msgs := s.pending
	s.pending = make([]*nats.Msg, 0, cap(msgs))
	var nc *nats.Conn
	if s.session != nil {
		nc = s.session.nc
	}
	s.mu.Unlock()
	return func(ctx context.Context) error {
		var failed int
		var first error
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				if failed++; first == nil {
					first = err
				}
			}
		}
		if first != nil {
			return fmt.Errorf("%d of %d acknowledgements failed: %w", failed, len(msgs), first)
		}
		if nc == nil || len(msgs) == 0 {
			return nil
		}
		return nc.FlushWithContext(ctx)
	}
}

func (natsFetcher) FetchFailed() string {
	return "consuming from NATS failed; binding the consumers again with backoff, not ready meanwhile"
}
