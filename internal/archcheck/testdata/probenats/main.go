// Command probenats is an embedder of inboxd with one source, NATS JetStream,
// and its outbox publisher: the root package, handlers and ingest/nats.
// TestEachSourceLinksItsBrokerAlone builds it: it links nats.go and no other
// broker client.
package main

import (
	"context"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/ingest/nats"
	"github.com/inboxd/inboxd/ingest/source"
)

func main() {
	reg := handlers.NewRegistry()
	ib, err := inboxd.New(inboxd.Config{Registry: reg,
		Sources: []source.Source{nats.New(nats.Config{URL: "nats://localhost:4222", Streams: []string{"s"}})},
		Outbox:  &inboxd.OutboxConfig{Publishers: []source.Publisher{nats.Publisher(nats.Config{URL: "nats://localhost:4222"})}}})
	if err == nil {
		_ = ib.Run(context.Background())
	}
}
