package nats

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/inboxd/inboxd/ingest"
	"github.com/inboxd/inboxd/internal/ingestcore"
	"github.com/inboxd/inboxd/internal/ingestcore/natsmap"
	"github.com/inboxd/inboxd/internal/natsurl"
	"github.com/inboxd/inboxd/internal/pgtest"
	"github.com/inboxd/inboxd/internal/testkit"
	"github.com/inboxd/inboxd/internal/testkit/natstest"
)

// natsBundle is one test's stream on the real NATS server (subjects
// "<stream>.>"), a publisher and a database.
type natsBundle struct {
	stream string
	nc     *nats.Conn
	js     jetstream.JetStream
	db     *pgtest.DB
}

// setupNATS creates a stream of the test's own and deletes it, with its
// consumers, when the test ends; opts adjust the stream's configuration.
func setupNATS(t *testing.T, opts ...func(*jetstream.StreamConfig)) *natsBundle {
	t.Helper()
	s := natstest.New(t, "inboxd_test_", opts...)
	return &natsBundle{stream: s.Name, nc: s.NC, js: s.JS, db: pgtest.New(t)}
}

// publish publishes msgs (subjects relative to the stream's, "x" meaning
// "<stream>.x") and waits for JetStream's acknowledgements; it returns how
// many the stream deduplicated on Nats-Msg-Id.
func (b *natsBundle) publish(t *testing.T, msgs ...*nats.Msg) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dups := 0
	for _, m := range msgs {
		m.Subject = b.stream + "." + m.Subject
		ack, err := b.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if ack.Duplicate {
			dups++
		}
	}
	return dups
}

// consumerInfo returns the durable consumer's state.
func (b *natsBundle) consumerInfo(t *testing.T, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.js.Consumer(ctx, b.stream, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// positionID is the event id the NATS source gives the stream's message at
// seq when it carries none: its sequence and the time the stream stored
// it, as the stream tells.
func (b *natsBundle) positionID(t *testing.T, seq uint64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := b.js.Stream(ctx, b.stream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, seq)
	if err != nil {
		t.Fatalf("message %d of stream %s: %v", seq, b.stream, err)
	}
	return fmt.Sprintf("%s/%d@%s", b.stream, seq, m.Time.UTC().Format(time.RFC3339Nano))
}

// drained waits until the consumer has nothing pending: every message
// delivered and acknowledged.
func (b *natsBundle) drained(t *testing.T, name string) {
	t.Helper()
	waitFor(t, 30*time.Second, func() (bool, string) {
		info := b.consumerInfo(t, name)
		return info.NumPending == 0 && info.NumAckPending == 0,
			fmt.Sprintf("consumer %s: %d pending, %d waiting for their ack", name, info.NumPending, info.NumAckPending)
	})
}

func (b *natsBundle) config() Config {
	return Config{URL: testkit.NATSURL(), Streams: []string{b.stream},
		Pipeline: ingest.PipelineConfig{RetryBackoffMin: 10 * time.Millisecond, RetryBackoffMax: 100 * time.Millisecond,
			Mapping: ingest.MapOptions{MaxPayload: 1024}}}
}

// startNATS runs s until the test ends (or stop is called).
func startNATS(t *testing.T, s *natsSource) (stop func() error) {
	t.Helper()
	return startSource(t, s.Run)
}

// start runs a NATSSource with cfg on the bundle's database until the
// test ends (or stop is called), logging to the test, its metrics on a
// registry of its own; tune, if any, adjusts it before it runs.
func (b *natsBundle) start(t *testing.T, cfg Config, tune ...func(*natsSource)) (_ *natsSource, stop func() error) {
	t.Helper()
	s, err := newNATS(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tune {
		f(s)
	}
	return s, startNATS(t, s)
}

// storesFirst publishes a message and waits until s has stored it and is
// ready: the source consumes.
func (b *natsBundle) storesFirst(t *testing.T, s *natsSource) {
	t.Helper()
	b.publish(t, natsEvent("x", "before", "t", "1"))
	waitFor(t, 20*time.Second, func() (bool, string) { return len(readRows(t, b.db)) == 1 && s.Ready(), "first row, ready" })
}

// conn returns the connection of s's session.
func (s *natsSource) conn() *nats.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session.nc
}

// natsEvent is a message with a Nats-Msg-Id and an event_type header.
func natsEvent(subject, id, typ, body string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Header.Set(natsmap.NATSMsgIDHeader, id)
	if typ != "" {
		m.Header.Set("event_type", typ)
	}
	m.Data = []byte(body)
	return m
}

// Messages land in the inbox once each, duplicates absorbed (those with one
// Nats-Msg-Id by the stream itself, those carrying their id in a header,
// which the stream cannot see, by the inbox), with every column as the
// mapping table says; the consumer, created from the stream's first
// message, ends with nothing pending.
func TestNATSExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	const n = 200
	var msgs []*nats.Msg
	headerDups := 0
	for i := range n {
		if i%2 == 0 {
			msgs = append(msgs, natsEvent("orders", fmt.Sprintf("e-%d", i), "order.created", fmt.Sprintf(`{"n":%d}`, i)))
			if i%10 == 0 { // the same Nats-Msg-Id: the stream drops it
				msgs = append(msgs, natsEvent("orders", fmt.Sprintf("e-%d", i), "order.created", `{"again":true}`))
			}
			continue
		}
		m := nats.NewMsg("orders")
		m.Header.Set("event_id", fmt.Sprintf("e-%d", i))
		m.Data = []byte(fmt.Sprintf(`{"n":%d}`, i))
		msgs = append(msgs, m)
		if i%10 == 1 { // the id in a header: only the inbox can tell
			d := nats.NewMsg("orders")
			d.Header.Set("event_id", fmt.Sprintf("e-%d", i))
			d.Data = []byte(`{"again":true}`)
			msgs = append(msgs, d)
			headerDups++
		}
	}
	keyed := nats.NewMsg("payments.eu")
	keyed.Header.Set("key", "order-7")
	keyed.Header.Set("trace", "t-1")
	keyed.Data = []byte("no id: stream and sequence")
	msgs = append(msgs, keyed)
	if got := b.publish(t, msgs...); got != n/10 {
		t.Fatalf("the stream deduplicated %d publications, want %d", got, n/10)
	}
	keyedSeq := uint64(len(msgs) - n/10) // the stream's last sequence

	reg := prometheus.NewRegistry()
	s, err := newNATS(b.config(), ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := startNATS(t, s)
	waitFor(t, 30*time.Second, func() (bool, string) {
		got := len(readRows(t, b.db))
		return got == n+1, fmt.Sprintf("%d rows, want %d", got, n+1)
	})
	want := fmt.Sprintf(`
# HELP inboxd_ingest_messages_fetched_total Messages fetched from the source.
# TYPE inboxd_ingest_messages_fetched_total counter
inboxd_ingest_messages_fetched_total{source_kind="nats"} %d
`, len(msgs)-n/10)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inboxd_ingest_messages_fetched_total"); err != nil {
		t.Error(err)
	}
	waitFor(t, 10*time.Second, func() (bool, string) { return s.Ready(), "ready" })
	b.drained(t, DefaultConsumer)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, b.db) // fails on a second row for one (source, event_id)
	e10 := rows[b.stream+" e-10"]
	if string(e10.Payload) != `{"n":10}` || e10.Status != ingestcore.StatusReceived || e10.EventType != "order.created" ||
		string(e10.Key) != b.stream+".orders" || e10.Headers[natsmap.NATSSubjectHeader] != b.stream+".orders" ||
		e10.Headers[natsmap.NATSMsgIDHeader] != "e-10" {
		t.Errorf("e-10 (id from Nats-Msg-Id, type from its header, key the subject) = %+v", e10)
	}
	if e11 := rows[b.stream+" e-11"]; string(e11.Payload) != `{"n":11}` || e11.EventType != b.stream+".orders" {
		t.Errorf("e-11 (id from event_id, type the subject) = %+v", e11)
	}
	k, ok := rows[b.stream+" "+b.positionID(t, keyedSeq)]
	if !ok || string(k.Key) != "order-7" || k.EventType != b.stream+".payments.eu" || k.Headers["trace"] != "t-1" {
		t.Errorf("message without id (id <stream>/<sequence>, key header) = %+v, present %v", k, ok)
	}
	if got := testutil.ToFloat64(s.Metrics.Duplicates); got != float64(headerDups) {
		t.Errorf("duplicates = %v, want %d", got, headerDups)
	}
	info := b.consumerInfo(t, DefaultConsumer)
	if info.Config.AckPolicy != jetstream.AckExplicitPolicy || info.Config.DeliverPolicy != jetstream.DeliverAllPolicy ||
		info.Config.AckWait != max(natsMinAckWait, 2*ingest.DefaultWriteTimeout) || info.Config.MaxDeliver != -1 {
		t.Errorf("created consumer: %+v", info.Config)
	}
}

// A stream that does not exist is a start-up error naming it.
func TestNATSMissingStream(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	cfg := b.config()
	cfg.Streams = []string{b.stream, b.stream + "_missing"}
	s, err := newNATS(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = s.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), `"`+b.stream+`_missing"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Run = %v, want an error naming the missing stream", err)
	}
}

// A consumer that exists is bound as it is, not recreated nor changed; an
// AckWait shorter than a batch write and a MaxDeliver are warned about. A
// consumer without explicit acknowledgements is a start-up error.
func TestNATSBindsExistingConsumer(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.js.CreateConsumer(ctx, b.stream, jetstream.ConsumerConfig{Durable: "mine", Description: "made by hand",
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 5 * time.Second, MaxDeliver: 50,
		DeliverPolicy: jetstream.DeliverNewPolicy}); err != nil {
		t.Fatal(err)
	}
	b.publish(t, natsEvent("old", "before", "t", "0"))
	before := b.consumerInfo(t, "mine")

	var logs syncBuffer
	cfg := b.config()
	cfg.Consumer = "mine"
	cfg.Subjects = []string{b.stream + ".only"}
	s, err := newNATS(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, zerolog.New(&logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startNATS(t, s)
	b.publish(t, natsEvent("new", "after", "t", "1"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		rows := readRows(t, b.db)
		_, ok := rows[b.stream+" after"]
		return ok && len(rows) == 2, fmt.Sprintf("%d rows, want both messages", len(rows))
	})
	after := b.consumerInfo(t, "mine")
	if !after.Created.Equal(before.Created) || after.Config.Description != "made by hand" || after.Config.AckWait != 5*time.Second ||
		after.Config.MaxDeliver != 50 || after.Config.FilterSubject != "" {
		t.Errorf("the consumer was changed: before %+v, after %+v", before.Config, after.Config)
	}
	for _, want := range []string{"AckWait does not exceed a batch write", "MaxDeliver set", "subject filter differs"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no warning %q in the logs:\n%s", want, logs.String())
		}
	}
	b.drained(t, "mine")

	if _, err := b.js.CreateConsumer(ctx, b.stream, jetstream.ConsumerConfig{Durable: "ackall", AckPolicy: jetstream.AckAllPolicy}); err != nil {
		t.Fatal(err)
	}
	cfg.Consumer = "ackall"
	s2, err := newNATS(cfg, ingestcore.PGWriter{Pool: b.db.Pool}, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if err := s2.Run(rctx); err == nil || !strings.Contains(err.Error(), `"ackall"`) || !strings.Contains(err.Error(), "explicit") {
		t.Errorf("Run with an AckAll consumer = %v, want a start-up error naming it", err)
	}
}

// natsKillWriter writes through to the database, then, the first time a
// batch holds a message, closes the source's connection before the
// pipeline can acknowledge it: JetStream must deliver the batch again.
type natsKillWriter struct {
	inner  ingestcore.InboxWriter
	s      atomic.Pointer[natsSource]
	killed atomic.Bool
}

func (w *natsKillWriter) WriteBatch(ctx context.Context, rows []ingestcore.Row) (int, error) {
	n, err := w.inner.WriteBatch(ctx, rows)
	if err == nil && w.killed.CompareAndSwap(false, true) {
		w.s.Load().conn().Close()
	}
	return n, err
}

// The acknowledgement comes only after the insert committed: a connection
// lost between the two leaves the batch unacknowledged, JetStream delivers
// it again after AckWait, and the redelivery adds no row (an oversize
// message's rejected row included: its id is its stream sequence).
func TestNATSAckOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	var msgs []*nats.Msg
	for i := range 20 {
		msgs = append(msgs, natsEvent("orders", fmt.Sprintf("e-%d", i), "order.created", "x"))
	}
	msgs = append(msgs, natsEvent("orders", "e-big", "order.created", strings.Repeat("B", 2000)))
	b.publish(t, msgs...)

	w := &natsKillWriter{inner: ingestcore.PGWriter{Pool: b.db.Pool}}
	cfg := b.config()
	cfg.AckWait = 2 * time.Second // the redelivery comes soon
	cfg.Pipeline.WriteTimeout = time.Second
	cfg.Pipeline.BatchSize = 1000
	cfg.Pipeline.BatchTimeout = 300 * time.Millisecond
	cfg.Pipeline.Linger = 300 * time.Millisecond // the first batch holds everything
	s, err := newNATS(cfg, w, testLogger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w.s.Store(s)
	stop := startNATS(t, s)
	waitFor(t, 30*time.Second, func() (bool, string) {
		n := testutil.ToFloat64(s.Metrics.MessagesFetched)
		return n >= 2*float64(len(msgs)) && testutil.ToFloat64(s.Metrics.Reconnects) >= 1 && s.Ready(),
			fmt.Sprintf("%v fetched, %v reconnects, ready %v", n, testutil.ToFloat64(s.Metrics.Reconnects), s.Ready())
	})
	b.drained(t, DefaultConsumer)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rows := readRows(t, b.db)
	if len(rows) != len(msgs) {
		t.Errorf("%d rows, want %d", len(rows), len(msgs))
	}
	big, ok := rows[b.stream+" "+b.positionID(t, uint64(len(msgs)))]
	if !ok || big.Status != ingestcore.StatusRejected || big.LastError == nil || !strings.Contains(*big.LastError, "payload of 2000 bytes") {
		t.Errorf("oversize message: %+v, present %v", big, ok)
	}
	if got := testutil.ToFloat64(s.Metrics.Duplicates); got < float64(len(msgs)) {
		t.Errorf("duplicates = %v, want the whole redelivered batch (%d)", got, len(msgs))
	}
}

// A connection that nats.go opens again by itself is counted and logged,
// and consuming goes on.
func TestNATSReconnects(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	var logs syncBuffer
	s, err := newNATS(b.config(), ingestcore.PGWriter{Pool: b.db.Pool}, zerolog.New(&logs), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	startNATS(t, s)
	b.storesFirst(t, s)

	if err := s.conn().ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		return testutil.ToFloat64(s.Metrics.Reconnects) == 1 && s.Ready() && strings.Contains(logs.String(), "reconnected to NATS"),
			"reconnected, logged and ready"
	})
	if !strings.Contains(logs.String(), "disconnected from NATS") {
		t.Errorf("the disconnection was not logged:\n%s", logs.String())
	}
	b.publish(t, natsEvent("x", "after", "t", "2"))
	waitFor(t, 20*time.Second, func() (bool, string) {
		_, ok := readRows(t, b.db)[b.stream+" after"]
		return ok, "row published after the reconnection"
	})
	b.drained(t, DefaultConsumer)
}

// Two replicas on one durable consumer: JetStream shares the messages
// between them, each acknowledges its own, and every event is one row, none
// lost, none doubled; the consumer ends with nothing pending.
func TestNATSTwoReplicasOnOneConsumer(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	cfg := b.config()
	cfg.Pipeline.BatchSize = 50 // so that both replicas get messages
	var replicas []*natsSource
	for range 2 {
		s, _ := b.start(t, cfg)
		replicas = append(replicas, s)
	}
	waitFor(t, 20*time.Second, func() (bool, string) {
		return replicas[0].Ready() && replicas[1].Ready(), "both replicas ready"
	})
	const n = 1000
	var msgs []*nats.Msg
	for i := range n {
		m := nats.NewMsg("x")
		m.Header.Set("event_id", fmt.Sprintf("e-%d", i))
		m.Data = []byte("x")
		msgs = append(msgs, m)
		if i%10 == 0 {
			d := nats.NewMsg("x")
			d.Header.Set("event_id", fmt.Sprintf("e-%d", i))
			d.Data = []byte("dup")
			msgs = append(msgs, d)
		}
	}
	b.publish(t, msgs...)
	waitFor(t, 60*time.Second, func() (bool, string) {
		got := len(readRows(t, b.db))
		return got == n, fmt.Sprintf("%d rows, want %d", got, n)
	})
	b.drained(t, DefaultConsumer)
	f0, f1 := testutil.ToFloat64(replicas[0].Metrics.MessagesFetched), testutil.ToFloat64(replicas[1].Metrics.MessagesFetched)
	if f0 == 0 || f1 == 0 || f0+f1 != float64(len(msgs)) {
		t.Errorf("replicas fetched %v and %v of %d messages", f0, f1, len(msgs))
	}
}

// fakeNATSMsg is a JetStream message for the mapping's unit tests.
type fakeNATSMsg struct {
	jetstream.Msg
	subject string
	header  nats.Header
	data    []byte
	seq     uint64
}

// fakeStored is when the stream stored every fakeNATSMsg, as its position
// id writes it.
var fakeStored = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)

const fakeStoredID = "@2025-01-02T03:04:05.000000006Z"

func (m fakeNATSMsg) Subject() string      { return m.subject }
func (m fakeNATSMsg) Headers() nats.Header { return m.header }
func (m fakeNATSMsg) Data() []byte         { return m.data }
func (m fakeNATSMsg) Metadata() (*jetstream.MsgMetadata, error) {
	return &jetstream.MsgMetadata{Sequence: jetstream.SequencePair{Stream: m.seq}, Timestamp: fakeStored.Local()}, nil
}

// MapNATS: Nats-Msg-Id, then the id headers, then
// <stream>/<sequence>@<time stored>; the
// type headers, then the subject; an invalid id in a header is rejected,
// not replaced by the fallback; a rejected row's id is its position.
func TestMapNATS(t *testing.T) {
	t.Parallel()
	r := natsmap.MapNATS("s", fakeNATSMsg{subject: "s.orders", header: nats.Header{"ce_id": {"c-1"}, "ce_type": {"paid"}}, seq: 3}, ingest.MapOptions{})
	if r.EventID != "c-1" || r.EventType != "paid" || string(r.Key) != "s.orders" || r.Status != ingestcore.StatusReceived {
		t.Errorf("by headers: %+v", r)
	}
	r = natsmap.MapNATS("s", fakeNATSMsg{subject: "s.orders", header: nats.Header{natsmap.NATSMsgIDHeader: {"m-1"}, "event_id": {"ignored"}}, seq: 3}, ingest.MapOptions{})
	if r.EventID != "m-1" || r.EventType != "s.orders" {
		t.Errorf("Nats-Msg-Id first, subject as type: %+v", r)
	}
	r = natsmap.MapNATS("s", fakeNATSMsg{subject: "s.orders", seq: 9}, ingest.MapOptions{})
	if r.EventID != "s/9"+fakeStoredID || r.EventType != "s.orders" || string(r.Headers) != `{"nats-subject":"s.orders"}` {
		t.Errorf("fallbacks: %+v (headers %s)", r, r.Headers)
	}
	r = natsmap.MapNATS("s", fakeNATSMsg{subject: "s.orders", header: nats.Header{"event_id": {"bad\xffid"}}, seq: 4}, ingest.MapOptions{})
	if r.Status != ingestcore.StatusRejected || r.Reason != ingestcore.RejectInvalidID || r.EventID != "s/4"+fakeStoredID || !strings.Contains(r.LastError, "header event_id") {
		t.Errorf("invalid id: %+v", r)
	}
	r = natsmap.MapNATS("s", fakeNATSMsg{subject: "s.orders", data: make([]byte, 20), seq: 5}, ingest.MapOptions{MaxPayload: 10})
	if r.Status != ingestcore.StatusRejected || r.Reason != ingestcore.RejectOversize || r.EventID != "s/5"+fakeStoredID {
		t.Errorf("oversize: %+v", r)
	}
}

func TestNATSConfigValidate(t *testing.T) {
	t.Parallel()
	cfg := Config{URL: "nats://u:s3cret@host:4222,http://x", Streams: []string{"a", "a", "b.c"}, Consumer: "x.y",
		AckWait: time.Second, TLS: ingest.TLSConfig{CertFile: "c.pem"}}.withDefaults()
	err := cfg.validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"INBOXD_NATS_URL is not", "listed twice", `"b.c" is not valid`, "INBOXD_NATS_CONSUMER",
		"AckWait (1s) must exceed", "set together"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error repeats the password: %q", err)
	}
	if got := natsurl.Redact("nats://u:s3cret@h1:4222, tls://t0ken@h2:4443"); got != "nats://u@h1:4222,tls://%5Bredacted%5D@h2:4443" {
		t.Errorf("RedactNATSURL = %q", got)
	}
	if c := (Config{URL: "tls://h:4222"}).withDefaults(); !c.TLS.Enabled || c.Consumer != DefaultConsumer ||
		c.AckWait != 2*ingest.DefaultWriteTimeout {
		t.Errorf("defaults: %+v", c)
	}
}

// A connection cut (through a proxy) makes the source not ready; nats.go
// opens it again by itself, the reconnection is counted, and what was
// published meanwhile is stored once, at once: the server held it for the
// next pull, well within AckWait (60 s). The message is published once the
// server has noticed the cut (TestNATSDeliveryIntoADeadConnection is the
// one published before it has, sent into the dead connection).
func TestNATSConnectionCut(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	cfg, proxy := b.proxied(t)
	s, _ := b.start(t, cfg)
	b.storesFirst(t, s)

	b.cutOff(t, s, proxy)
	b.publish(t, natsEvent("x", "during", "t", "2"))
	if err := proxy.Restore(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() (bool, string) {
		return testutil.ToFloat64(s.Metrics.Reconnects) >= 1 && s.Ready(), "reconnected and ready"
	})
	b.publish(t, natsEvent("x", "after", "t", "3"))
	waitFor(t, 30*time.Second, func() (bool, string) {
		rows := readRows(t, b.db)
		return len(rows) == 3, fmt.Sprintf("%d rows, want 3", len(rows))
	})
	b.drained(t, DefaultConsumer)
}

// A consumer deleted while the source runs is created again (from the
// stream's first message: everything is delivered again, and the
// redeliveries are absorbed by the inbox); consuming goes on.
func TestNATSConsumerDeletedIsCreatedAgain(t *testing.T) {
	t.Parallel()
	b := setupNATS(t)
	s, _ := b.start(t, b.config())
	b.publish(t, natsEvent("x", "e-1", "t", "1"), natsEvent("x", "e-2", "t", "2"))
	waitFor(t, 20*time.Second, func() (bool, string) { return len(readRows(t, b.db)) == 2 && s.Ready(), "two rows, ready" })
	b.drained(t, DefaultConsumer)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.js.DeleteConsumer(ctx, b.stream, DefaultConsumer); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() (bool, string) {
		return testutil.ToFloat64(s.Metrics.Reconnects) >= 1 && s.Ready(), "consumer bound again, ready"
	})
	b.publish(t, natsEvent("x", "e-3", "t", "3"))
	waitFor(t, 30*time.Second, func() (bool, string) {
		rows := readRows(t, b.db)
		return len(rows) == 3 && testutil.ToFloat64(s.Metrics.Duplicates) >= 2,
			fmt.Sprintf("%d rows (want 3), %v duplicates (want the 2 redelivered)", len(rows), testutil.ToFloat64(s.Metrics.Duplicates))
	})
	b.drained(t, DefaultConsumer)
}

// With the stream's own deduplication out of the way (a window shorter
// than the gap between a message and its duplicate), a duplicate with the
// same Nats-Msg-Id reaches the consumer, and the inbox absorbs it.
func TestNATSDuplicatesPastTheStreamWindow(t *testing.T) {
	t.Parallel()
	b := setupNATS(t, func(sc *jetstream.StreamConfig) { sc.Duplicates = 100 * time.Millisecond })
	const n = 50
	var msgs []*nats.Msg
	for i := range n {
		msgs = append(msgs, natsEvent("x", fmt.Sprintf("e-%d", i), "t", "first"))
	}
	b.publish(t, msgs...)
	time.Sleep(300 * time.Millisecond) // past the stream's window: the same ids are new to it
	var dups []*nats.Msg
	for i := 0; i < n; i += 10 {
		dups = append(dups, natsEvent("x", fmt.Sprintf("e-%d", i), "t", "again"))
	}
	if got := b.publish(t, dups...); got != 0 {
		t.Fatalf("the stream deduplicated %d publications past its window", got)
	}
	s, _ := b.start(t, b.config())
	waitFor(t, 30*time.Second, func() (bool, string) {
		d := testutil.ToFloat64(s.Metrics.Duplicates)
		return d == float64(len(dups)), fmt.Sprintf("%v duplicates, want %d", d, len(dups))
	})
	rows := readRows(t, b.db) // fails on a second row for one (source, event_id)
	if len(rows) != n {
		t.Errorf("%d rows, want %d", len(rows), n)
	}
	if r := rows[b.stream+" e-10"]; string(r.Payload) != "first" {
		t.Errorf("e-10 = %+v: the first publication should win", r)
	}
	b.drained(t, DefaultConsumer)
}

// A rejected NATS row maps again by the NATS rules (Nats-Msg-Id, the
// subject as the type) once the cause is fixed, a row stored before the
// position had its time too ("<stream>/<sequence>"); an id no NATS source
// gives is not taken for one.
func TestRemapNATSRejected(t *testing.T) {
	t.Parallel()
	m := fakeNATSMsg{subject: "s.orders", header: nats.Header{natsmap.NATSMsgIDHeader: {"m-1"}}, data: []byte("0123456789"), seq: 7}
	rejected := natsmap.MapNATS("s", m, ingest.MapOptions{MaxPayload: 5})
	if rejected.Status != ingestcore.StatusRejected || rejected.EventID != "s/7"+fakeStoredID {
		t.Fatalf("rejected = %+v", rejected)
	}
	hs := []ingestcore.Header{{Key: natsmap.NATSMsgIDHeader, Value: []byte("m-1")}, {Key: natsmap.NATSSubjectHeader, Value: []byte("s.orders")}}
	row, ok := remapNATSRejected(rejected.EventID, "s", []byte("s.orders"), m.data, hs, ingest.MapOptions{MaxPayload: 1024})
	if !ok || row.Status != ingestcore.StatusReceived || row.EventID != "m-1" || row.EventType != "s.orders" || string(row.Payload) != "0123456789" {
		t.Errorf("remapped = %+v, ok %v", row, ok)
	}
	if old, ok := remapNATSRejected("s/7", "s", []byte("s.orders"), m.data, hs, ingest.MapOptions{MaxPayload: 1024}); !ok || old.EventID != "m-1" {
		t.Errorf("a row of an older version remapped = %+v, ok %v", old, ok)
	}
	for _, id := range []string{"s/0/7", "s/sha256/ab", "t/7", "s/", "s/7@", "s/7@yesterday", "s/x@2025-01-02T03:04:05Z",
		"s/7@2025-01-02T05:04:05+02:00", "s/7@2025-01-02T03:04:05.000000060Z"} {
		if natsmap.IsNATSPositionID("s", id) {
			t.Errorf("%q taken for a NATS row", id)
		}
	}
}

// RemapRejected, the CLI's entry point, maps a NATS row by the NATS rules,
// not Kafka's: as `inboxd requeue --status rejected` reads the row back.
func TestRemapRejectedUsesTheNATSRules(t *testing.T) {
	t.Parallel()
	m := fakeNATSMsg{subject: "s.orders", header: nats.Header{natsmap.NATSMsgIDHeader: {"m-1"}}, data: []byte("0123456789"), seq: 7}
	rejected := natsmap.MapNATS("s", m, ingest.MapOptions{MaxPayload: 5})
	km := kafka.Message{Topic: "s", Key: rejected.Key, Value: m.data, Headers: []kafka.Header{
		{Key: natsmap.NATSMsgIDHeader, Value: []byte("m-1")}, {Key: natsmap.NATSSubjectHeader, Value: []byte("s.orders")}}}
	row := remapRejected(rejected.EventID, km, ingest.MapOptions{MaxPayload: 1024})
	if row.Status != ingestcore.StatusReceived || row.EventID != "m-1" || row.EventType != "s.orders" {
		t.Errorf("NATS row mapped again: %+v", row)
	}
}
