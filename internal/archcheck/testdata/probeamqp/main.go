// Command probeamqp is an embedder of inboxd with one source, RabbitMQ:
// the root package, handlers and ingest/amqp. TestEmbedderLinks builds it:
// it links amqp091-go and no other broker client.
package main

import (
	"context"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/ingest/amqp"
	"github.com/inboxd/inboxd/ingest/source"
)

func main() {
	reg := handlers.NewRegistry()
	ib, err := inboxd.New(inboxd.Config{Registry: reg,
		Sources: []source.Source{amqp.New(amqp.Config{URL: "amqp://localhost/", Queues: []string{"q"}})}})
	if err == nil {
		_ = ib.Run(context.Background())
	}
}
