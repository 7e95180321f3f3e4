// Package app is the inboxd command: its subcommands (run, migrate, stats,
// dead, show, requeue, discard, prune, help, version; `inboxd help` lists
// them with their flags) and the daemon that wires ingest, workers,
// retention and the HTTP endpoints together.
//
// Services that want their own Go handlers run the same daemon from their
// own main, passing a Registry in Options:
//
//	reg := handlers.NewRegistry()
//	if err := reg.HandleTx("payment.captured", capture); err != nil {
//		log.Fatal(err)
//	}
//	ctx, stop := app.SignalContext(context.Background(), os.Stderr)
//	defer stop()
//	os.Exit(app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, app.Options{Registry: reg}))
//
// The routes file (INBOXD_ROUTES) adds its routes to a copy of that
// registry (so SIGHUP can load it again); an event type registered in both
// places is a start-up error.
package app
