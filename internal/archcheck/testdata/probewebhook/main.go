// Command probewebhook is an embedder of inboxd with one source, webhooks:
// the root package, handlers and ingest/webhook. TestEmbedderLinks builds it:
// it links no broker client.
package main

import (
	"context"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
	"github.com/inboxd/inboxd/ingest/source"
	"github.com/inboxd/inboxd/ingest/webhook"
)

func main() {
	reg := handlers.NewRegistry()
	ib, err := inboxd.New(inboxd.Config{Registry: reg,
		Sources: []source.Source{webhook.New(webhook.Config{Addr: "localhost:8081"})}})
	if err == nil {
		_ = ib.Run(context.Background())
	}
}
