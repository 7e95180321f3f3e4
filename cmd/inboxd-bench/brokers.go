package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/inboxd/inboxd/internal/brokers/amqpconn"
	"github.com/inboxd/inboxd/internal/natsurl"
)

// The RabbitMQ and NATS JetStream runs use the real servers of the machine,
// as the tests do (INBOXD_TEST_AMQP_URL and INBOXD_TEST_NATS_URL override
// these, as -amqp-url and -nats-url do).
const (
	defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"
	defaultNATSURL = "nats://127.0.0.1:4222"
	// rabbitPrefetch is the prefetch of the second RabbitMQ run, beside
	// the default (which is bounded in bytes for the largest accepted
	// messages, and so caps batches).
	rabbitPrefetch = 1000
	// rabbitComm and natsComm are the command names of the servers'
	// processes, whose CPU time the runs measure when they run on this
	// machine (zero otherwise).
	rabbitComm = "beam.smp"
	natsComm   = "nats-server"
)

// envOr is the variable name's value, def when it is empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// randomName is prefix followed by eight random hex digits.
func randomName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// cleanupContext is a short context for deleting a queue or a stream at the
// end of a run, even when the run's context was cancelled.
func cleanupContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 15*time.Second)
}

// benchRabbitMQ measures the daemon end to end from RabbitMQ, as
// benchEndToEnd does from Kafka: n events with the Kafka run's payload are
// published to a durable queue of the run's own (persistent messages, with
// publisher confirms; the time this takes alone is the broker's publish
// rate, the ceiling), then the clock starts with app.Main and stops when
// every event is a processed row. Both measure the CPU time of the
// broker's server process too, when it runs on this machine. prefetch is INBOXD_AMQP_PREFETCH (0: the
// daemon's default). The queue is deleted at the end.
func benchRabbitMQ(ctx context.Context, env *environment, url string, n, prefetch int) (run, publish Rate, err error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, Rate{}, err
	}
	defer done()

	conn, err := amqp.Dial(url)
	if err != nil {
		return Rate{}, Rate{}, fmt.Errorf("connect to RabbitMQ at %s (start it with `rabbitmq-server -detached`, or leave it out of -run): %w", amqpconn.RedactURL(url), err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return Rate{}, Rate{}, err
	}
	if err := ch.Confirm(false); err != nil {
		return Rate{}, Rate{}, err
	}
	queue := randomName("inboxd-bench-")
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return Rate{}, Rate{}, fmt.Errorf("declare queue %s: %w", queue, err)
	}
	defer func() {
		// A channel of its own: ch may be closed by an error.
		if dch, derr := conn.Channel(); derr == nil {
			if _, derr = dch.QueueDelete(queue, false, false, false); derr != nil && err == nil {
				err = fmt.Errorf("delete queue %s: %w", queue, derr)
			}
			_ = dch.Close()
		} else if err == nil {
			err = fmt.Errorf("delete queue %s: %w", queue, derr)
		}
	}()

	start, self0, broker0 := time.Now(), selfCPU(), processCPU(rabbitComm)
	confirms := make([]*amqp.DeferredConfirmation, 0, n)
	for i := range n {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			MessageId:    "ev-" + strconv.Itoa(i),
			Type:         eventType,
			Headers:      amqp.Table{"key": "order-" + strconv.Itoa(i)},
			Body:         benchPayload,
			DeliveryMode: amqp.Persistent,
		})
		if err != nil {
			return Rate{}, Rate{}, fmt.Errorf("publish: %w", err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return Rate{}, Rate{}, fmt.Errorf("publish confirm: %w", err)
		}
		if !ok {
			return Rate{}, Rate{}, errors.New("publish: RabbitMQ nacked a message")
		}
	}
	publish = newRate("rabbitmq-publish", "RabbitMQ publish alone (confirms)", n, time.Since(start))
	publish.CPU = &CPUUse{Process: selfCPU() - self0, Broker: processCPU(rabbitComm) - broker0, Wall: publish.Seconds}

	dir, err := os.MkdirTemp("", "inboxd-bench-")
	if err != nil {
		return Rate{}, Rate{}, err
	}
	defer os.RemoveAll(dir)
	routes, err := routesFile(dir)
	if err != nil {
		return Rate{}, Rate{}, err
	}
	vars := []string{"INBOXD_AMQP_URL=" + url, "INBOXD_AMQP_QUEUES=" + queue}
	name, label := "rabbitmq", "inboxd from RabbitMQ, default prefetch"
	if prefetch > 0 {
		vars = append(vars, "INBOXD_AMQP_PREFETCH="+strconv.Itoa(prefetch))
		name, label = fmt.Sprintf("rabbitmq-prefetch%d", prefetch), fmt.Sprintf("inboxd from RabbitMQ, prefetch %d", prefetch)
	}
	m, err := measureDaemon(ctx, db, pool, queue, []string{"ev-" + strconv.Itoa(n-1)}, n, baseDaemonEnv(db, routes, vars...), profiles{}, rabbitComm, nil)
	if err != nil {
		return Rate{}, Rate{}, err
	}
	return m.rate(name, label, n), publish, nil
}

// benchNATS measures the daemon end to end from NATS JetStream, as
// benchRabbitMQ does from RabbitMQ: n events are published to a stream of
// the run's own (file storage, subjects "<stream>.>"; a Nats-Msg-Id per
// event, each publish waiting for its ack asynchronously; the time this
// takes alone is the broker's publish rate, the ceiling), then the daemon
// creates its durable consumer and ingests them. The stream is deleted at
// the end, with the consumer.
func benchNATS(ctx context.Context, env *environment, url string, n int) (run, publish Rate, err error) {
	db, pool, done, err := env.open(ctx, 0)
	if err != nil {
		return Rate{}, Rate{}, err
	}
	defer done()

	nc, err := nats.Connect(url)
	if err != nil {
		return Rate{}, Rate{}, fmt.Errorf("connect to NATS at %s (start nats-server with -js, or leave it out of -run): %w", natsurl.Redact(url), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return Rate{}, Rate{}, err
	}
	stream := randomName("inboxd_bench_")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.FileStorage}); err != nil {
		return Rate{}, Rate{}, fmt.Errorf("create stream %s: %w", stream, err)
	}
	defer func() {
		cctx, cancel := cleanupContext()
		defer cancel()
		if derr := js.DeleteStream(cctx, stream); derr != nil && err == nil {
			err = fmt.Errorf("delete stream %s: %w", stream, derr)
		}
	}()

	subject := stream + ".orders"
	start, self0, broker0 := time.Now(), selfCPU(), processCPU(natsComm)
	acks := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		msg := &nats.Msg{Subject: subject, Data: benchPayload, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, "ev-"+strconv.Itoa(i))
		msg.Header.Set("event_type", eventType)
		msg.Header.Set("key", "order-"+strconv.Itoa(i))
		f, err := js.PublishMsgAsync(msg, jetstream.WithStallWait(30*time.Second))
		if err != nil {
			return Rate{}, Rate{}, fmt.Errorf("publish: %w", err)
		}
		acks = append(acks, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return Rate{}, Rate{}, ctx.Err()
	case <-time.After(5 * time.Minute):
		return Rate{}, Rate{}, fmt.Errorf("publish: %d acks outstanding after 5 minutes", js.PublishAsyncPending())
	}
	for _, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return Rate{}, Rate{}, fmt.Errorf("publish: %w", err)
		}
	}
	publish = newRate("nats-publish", "NATS JetStream publish alone (acks)", n, time.Since(start))
	publish.CPU = &CPUUse{Process: selfCPU() - self0, Broker: processCPU(natsComm) - broker0, Wall: publish.Seconds}

	dir, err := os.MkdirTemp("", "inboxd-bench-")
	if err != nil {
		return Rate{}, Rate{}, err
	}
	defer os.RemoveAll(dir)
	routes, err := routesFile(dir)
	if err != nil {
		return Rate{}, Rate{}, err
	}
	vars := []string{"INBOXD_NATS_URL=" + url, "INBOXD_NATS_STREAMS=" + stream, "INBOXD_NATS_CONSUMER=inboxd-bench"}
	m, err := measureDaemon(ctx, db, pool, stream, []string{"ev-" + strconv.Itoa(n-1)}, n, baseDaemonEnv(db, routes, vars...), profiles{}, natsComm, nil)
	if err != nil {
		return Rate{}, Rate{}, err
	}
	return m.rate("nats", "inboxd from NATS JetStream", n), publish, nil
}

// benchRabbitMQRuns runs benchRabbitMQ with the default prefetch and with
// rabbitPrefetch; the publish rate is both runs' publishing together.
func benchRabbitMQRuns(ctx context.Context, env *environment, url string, n int) ([]Rate, error) {
	def, p1, err := benchRabbitMQ(ctx, env, url, n, 0)
	if err != nil {
		return nil, err
	}
	big, p2, err := benchRabbitMQ(ctx, env, url, n, rabbitPrefetch)
	if err != nil {
		return nil, err
	}
	publish := newRate(p1.Name, p1.Label, p1.Events+p2.Events, time.Duration((p1.Seconds+p2.Seconds)*float64(time.Second)))
	publish.CPU = &CPUUse{Process: p1.CPU.Process + p2.CPU.Process, Broker: p1.CPU.Broker + p2.CPU.Broker, Wall: publish.Seconds}
	return []Rate{publish, def, big}, nil
}

// benchNATSRuns runs benchNATS: its publish rate, then the daemon's.
func benchNATSRuns(ctx context.Context, env *environment, url string, n int) ([]Rate, error) {
	r, publish, err := benchNATS(ctx, env, url, n)
	if err != nil {
		return nil, err
	}
	return []Rate{publish, r}, nil
}

// checkBrokers connects to the servers of the broker runs that o includes,
// before any measurement: a server that is down fails the run at once,
// not after the minutes of the measurements before it.
func checkBrokers(o *options) error {
	if o.parts["rabbitmq"] {
		conn, err := amqp.Dial(o.amqpURL)
		if err != nil {
			return fmt.Errorf("rabbitmq: connect to RabbitMQ at %s (start it with `rabbitmq-server -detached`, or leave rabbitmq out of -run): %w", amqpconn.RedactURL(o.amqpURL), err)
		}
		_ = conn.Close()
	}
	if o.parts["nats"] {
		nc, err := nats.Connect(o.natsURL)
		if err != nil {
			return fmt.Errorf("nats: connect to NATS at %s (start nats-server with -js, or leave nats out of -run): %w", natsurl.Redact(o.natsURL), err)
		}
		nc.Close()
	}
	return nil
}
