// Command probeamqp is an embedder of inboxd with one source, RabbitMQ, and
// its outbox publisher: the root package, handlers and ingest/amqp.
// TestEachSourceLinksItsBrokerAlone builds it: it links amqp091-go and no
// other broker client.
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
		Sources: []source.Source{amqp.New(amqp.Config{URL: "amqp://localhost/", Queues: []string{"q"}})},
		Outbox:  &inboxd.OutboxConfig{Publishers: []source.Publisher{amqp.Publisher(amqp.Config{URL: "amqp://localhost/"})}}})
	if err == nil {
		_ = ib.Run(context.Background())
	}
}
