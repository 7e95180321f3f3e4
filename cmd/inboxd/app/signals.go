package app

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// SignalContext returns a context cancelled by the first SIGINT or SIGTERM:
// the daemon then stops claiming, lets handlers finish within
// INBOXD_SHUTDOWN_TIMEOUT and releases what is left. A second SIGINT or
// SIGTERM exits the process at once, with status 128 + the signal's number:
// rows still held are returned by the rescuer when their leases expire.
// SIGHUP is not a stop: `inboxd run` reloads its routes file on it. Call
// stop to release the signal handlers. Each signal is logged on stderr as
// the daemon logs (INBOXD_LOG_FORMAT, INBOXD_LOG_LEVEL of the process's
// environment).
func SignalContext(parent context.Context, stderr io.Writer) (ctx context.Context, stop func()) {
	log := environLogger(os.Environ(), stderr)
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	// SIGHUP's default action kills the process; until `run` listens for
	// it, it is ignored here rather than allowed to kill without releasing
	// rows.
	signal.Ignore(syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-sigs:
			log.Info().Str("signal", sig.String()).Msg("stopping (send the signal again to exit at once)")
			cancel()
		case <-done:
			return
		}
		select {
		case sig := <-sigs:
			log.Warn().Str("signal", sig.String()).Msg("second signal: exiting at once, rows still held return when their leases expire")
			os.Exit(128 + int(sig.(syscall.Signal)))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}
