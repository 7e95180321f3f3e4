// Package app is the inboxd command: its subcommands (run, migrate, stats,
// dead, show, requeue, discard, prune, help, version; `inboxd help` lists
// them with their flags) and the daemon. The daemon is the thin layer over
// package inboxd (the module's root) that turns the INBOXD_* environment
// into an inboxd.Config, adds the routes file, the HTTP endpoints, SIGHUP
// reloads and systemd notifications, and runs inboxd.New and Run.
//
// A service that only wants the engine with its own Go handlers uses
// package inboxd directly, with Go values and no environment. One that
// wants the whole inboxd command, configured by INBOXD_* variables, with
// Go handlers beside the routes file's, passes a Registry in Options:
//
//	reg := handlers.NewRegistry()
//	if err := reg.HandleTx("payment.captured", capture); err != nil {
//		log.Fatal(err)
//	}
//	ctx, stop := app.SignalContext(context.Background(), os.Stderr)
//	code := app.Main(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr, app.Options{Registry: reg})
//	stop() // before os.Exit, which runs no deferred call
//	os.Exit(code)
//
// The routes file (INBOXD_ROUTES) adds its routes to a copy of that
// registry (so SIGHUP can load it again); an event type registered in both
// places is a start-up error.
package app
