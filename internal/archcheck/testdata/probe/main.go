// Command probe is what an embedder of inboxd writes at the least: the root
// package and handlers, nothing else. TestEmbedderLinks builds it and counts
// the modules it links.
package main

import (
	"context"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/handlers"
)

func main() {
	reg := handlers.NewRegistry()
	ib, err := inboxd.New(inboxd.Config{Registry: reg})
	if err == nil {
		_ = ib.Run(context.Background())
	}
}
