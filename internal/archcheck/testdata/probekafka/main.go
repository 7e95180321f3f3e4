// Command probekafka is an embedder of inboxd with one source, Kafka, and its
// outbox publisher: the root package, handlers and ingest/kafka.
// TestEachSourceLinksItsBrokerAlone builds it: it links kafka-go and franz-go,
// Kafka's clients, and no other broker client.
package main

import (
	"context"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/ingest/kafka"
	"github.com/inboxd/inboxd/ingest/source"
)

func main() {
	reg := handlers.NewRegistry()
	ib, err := inboxd.New(inboxd.Config{Registry: reg,
		Sources: []source.Source{kafka.New(kafka.Config{Brokers: []string{"localhost:9092"}, Topics: []string{"t"}, Group: "g"})},
		Outbox:  &inboxd.OutboxConfig{Publishers: []source.Publisher{kafka.Publisher(kafka.Config{Brokers: []string{"localhost:9092"}}, "gzip")}}})
	if err == nil {
		_ = ib.Run(context.Background())
	}
}
