package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/inboxd/inboxd/internal/stdwebhooks"
)

// sendKinds are send's --source values.
var sendKinds = []string{"kafka", "rabbitmq", "nats", "webhook"}

// testEvents are send's events: n order.created events with ids of this
// run's own (order-<8 hex>-<i>), the first sent twice, as a producer's
// retry would.
func testEvents(n int) []event {
	run := demoName("")
	evs := make([]event, 0, n+1)
	for i := 1; i <= n; i++ {
		evs = append(evs, event{id: fmt.Sprintf("order-%s-%d", run, i), typ: "order.created",
			payload: fmt.Sprintf(`{"order_id":%d,"amount":"%d.90"}`, i, i%100)})
	}
	if n > 0 {
		evs = append(evs, evs[0])
	}
	return evs
}

// runSend is `inboxd-demo send`: test events to a running inboxd, through
// the broker (or webhook listener) it consumes, needing nothing but the
// project and the local servers.
func runSend(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("inboxd-demo send", flag.ContinueOnError)
	kind := fs.String("source", "", "where the events go: kafka, rabbitmq, nats or webhook")
	n := fs.Int("events", 10, "order.created events to send (the first is sent twice: a duplicate the inbox absorbs)")
	brokers := fs.String("brokers", "127.0.0.1:9092", "kafka: the brokers (inboxd-demo kafka runs one)")
	topicName := fs.String("topic", "orders", "kafka: the topic")
	amqpURL := fs.String("amqp-url", defaultAMQPURL, "rabbitmq: the server")
	queue := fs.String("queue", "orders", "rabbitmq: the queue (declared, durable, when missing)")
	natsURL := fs.String("nats-url", defaultNATSURL, "nats: the server")
	stream := fs.String("stream", "ORDERS", "nats: the stream (created with subjects <stream>.> when missing); the events go to <stream>.orders")
	webhookURL := fs.String("url", "http://127.0.0.1:8090/webhooks/payments", "webhook: the source's URL")
	secretFile := fs.String("secret-file", "payments.secret", "webhook: the file with the source's whsec_ secret (its first line)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return errors.New("--events must be at least 1")
	}
	var src source
	var err error
	switch *kind {
	case "kafka":
		src = &kafkaSource{brokers: []string{*brokers}, topic: *topicName}
	case "rabbitmq":
		src, err = openRabbitMQ(*amqpURL, *queue, false, out)
	case "nats":
		src, err = openNATS(ctx, *natsURL, *stream, false, out)
	case "webhook":
		src, err = newWebhookSender(*webhookURL, *secretFile)
	default:
		return fmt.Errorf("--source %q: use one of kafka, rabbitmq, nats, webhook", *kind)
	}
	if err != nil {
		return err
	}
	defer src.close()
	evs := testEvents(*n)
	var sent counter
	if err := src.publish(ctx, evs, &sent); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	fmt.Fprintf(out, "sent %d order.created events to %s (%s twice: one row for it), ids %s … %s\n",
		sent.get(), src.name(), evs[0].id, evs[0].id, evs[len(evs)-2].id)
	fmt.Fprintln(out, "see them: bin/inboxd stats, or the console's overview")
	return nil
}

// webhookSender posts events to a Standard Webhooks source of a running
// inboxd, signed with the source's secret: the event id as webhook-id, the
// type in the body's "type" field (docs/webhooks.md).
type webhookSender struct {
	url    string
	key    []byte
	client *http.Client
}

func newWebhookSender(url, secretFile string) (*webhookSender, error) {
	b, err := os.ReadFile(secretFile)
	if err != nil {
		return nil, fmt.Errorf("--secret-file: %w", err)
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	key, err := stdwebhooks.DecodeSecret(string(first))
	if err != nil {
		return nil, fmt.Errorf("--secret-file %s: %w", secretFile, err)
	}
	return &webhookSender{url: url, key: key, client: &http.Client{Timeout: 30 * time.Second}}, nil
}

func (w *webhookSender) name() string      { return "webhook " + w.url }
func (w *webhookSender) malformed() string { return "" }
func (w *webhookSender) env() []string     { return nil }
func (w *webhookSender) close() error      { return nil }

// publish posts each event and wants a 200: inboxd answers it once the row
// committed.
func (w *webhookSender) publish(ctx context.Context, evs []event, sent *counter) error {
	for _, e := range evs {
		body := []byte(`{"type":"` + e.typ + `","data":` + e.payload + `}`)
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("webhook-id", e.id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", stdwebhooks.Sign(w.key, e.id, ts, body))
		resp, err := w.client.Do(req)
		if err != nil {
			return err
		}
		answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s: %s", w.url, resp.Status, bytes.TrimSpace(answer))
		}
		sent.add(1)
	}
	return nil
}

// runKafka is `inboxd-demo kafka`: an embedded Kafka-protocol broker
// (franz-go's kfake, in memory) for a real run of inboxd on Kafka on a
// machine without one, until Ctrl-C. Topics are created on first use.
func runKafka(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("inboxd-demo kafka", flag.ContinueOnError)
	port := fs.Int("port", 9092, "the broker's port on 127.0.0.1")
	partitions := fs.Int("partitions", 4, "partitions of each topic")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(*port), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(*partitions), kfake.SeedTopics(int32(*partitions), topic))
	if err != nil {
		return fmt.Errorf("start the embedded broker: %w", err)
	}
	defer cluster.Close()
	fmt.Fprintf(out, "kafka      embedded broker at %s (in memory: gone when it stops), topic %q; Ctrl-C stops it\n",
		cluster.ListenAddrs()[0], topic)
	<-ctx.Done()
	return nil
}
